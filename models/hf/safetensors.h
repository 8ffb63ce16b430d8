// Reading and writing Hugging Face safetensors files: one file, or a directory holding
// model.safetensors or a sharded set (model-00001-of-0000N.safetensors ... and
// model.safetensors.index.json, whose "weight_map" maps tensor names to shard files).
//
// The format (https://github.com/huggingface/safetensors): 8 bytes N, the header's length as
// an unsigned 64-bit little-endian integer; N bytes of UTF-8 JSON, an object mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// data section) plus an optional "__metadata__" map of strings to strings, padded with spaces;
// then the data section, every byte of which belongs to exactly one tensor. Elements are
// row-major and little-endian. Only F32, BF16 and F16 tensors are supported; little-endian
// hosts only (the build fails on a big-endian one).
//
// Invariants: an open SafetensorsSet has checked every header entry against its file before
// returning (dtype, shape, byte length, offsets inside the data, no overlap, no gap, no
// trailing bytes, no duplicate name; in a sharded set the index and the shards agree), so a
// read can only fail on I/O or a file changed since. Errors name the file, the tensor where
// there is one, and the problem. The writers never leave a half-written file under the final
// name: they write `<path>.partial`, sync it, then rename.
//
// The declarations live in three headers, all of which come with this one: the element types
// and StTensor (safetensors_format.h), the reader (here) and the writers
// (safetensors_writer.h). The reader's parts are internal to the library: one file's header
// checked (safetensors_header.h), a sharded set's index (safetensors_index.h).
//
// Thread-safety: SafetensorsSet is a value (copies share the open file descriptors, closed
// with the last copy); its const methods may be called from several threads at once. The
// free functions are independent of each other.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "models/hf/safetensors_format.h"  // StDType, StTensor, the half conversions
#include "models/hf/safetensors_writer.h"  // StOutputTensor, WriteSafetensors(Directory)

namespace strata {

// One .safetensors file or a sharded set, opened and checked; the tensors' bytes are read
// on demand with pread, so a rank reads only the ranges it needs.
class SafetensorsSet {
 public:
  // One file. Fails (InvalidArgument or DataLoss, naming the file and problem) on any
  // malformed header or data layout; NotFound etc. (from errno) when it cannot be opened.
  static StatusOr<SafetensorsSet> OpenFile(const std::string& path);
  // A directory with model.safetensors.index.json (the shards it names are all opened and
  // checked against it) or else model.safetensors. Both at once is an error (one is stale).
  static StatusOr<SafetensorsSet> OpenDirectory(const std::string& dir);

  // Every tensor of the set, sorted by name.
  const std::vector<StTensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or null; valid while this set lives.
  const StTensor* Find(const std::string& name) const;
  // The "__metadata__" map of the file (of the first shard, by file name, in a sharded set);
  // empty when it has none.
  std::map<std::string, std::string> metadata() const { return metadata_; }

  // Converts elements [begin, begin + count) of `tensor` (flat row-major index; a tensor of
  // this set) to fp32 into out[0, count): F32 bit-exact, BF16 and F16 exact. Reads only those
  // bytes, in pieces of at most 4 MiB (memory stays bounded for any count). Errors name the
  // file and tensor; a file shorter than its header promised is DataLoss ("truncated").
  Status ReadFloats(const StTensor& tensor, uint64_t begin, uint64_t count, float* out) const;
  // For a BF16 tensor: the same elements' raw bf16 values into raw[0, count) and, where
  // `widened` is not null, as fp32 into widened[0, count) (what ReadFloats gives): one read
  // for a bf16 engine's params and its fp32 master. Another dtype is InvalidArgument.
  Status ReadBf16(const StTensor& tensor, uint64_t begin, uint64_t count, bf16* raw,
                  float* widened) const;
  // A BF16 tensor's elements as they are, in a buffer of the calling thread's (the O_DIRECT
  // read's own where it lands 2-byte aligned), valid until this thread's next read; for
  // callers that widen on the way (a transpose). Another dtype is InvalidArgument.
  StatusOr<const bf16*> ReadBf16View(const StTensor& tensor, uint64_t begin, uint64_t count) const;
  // The same elements as fp32 in a buffer of the calling thread's, valid until this thread's
  // next ReadFloats or ReadFloatsView: F32 read with O_DIRECT is used where it lands (no
  // copy; the caller transposes or scatters from it). The buffers grow to the largest
  // request: callers bound `count`.
  StatusOr<const float*> ReadFloatsView(const StTensor& tensor, uint64_t begin,
                                        uint64_t count) const;

 private:
  // The tensor is of this set and [begin, begin + count) inside it.
  Status CheckRead(const StTensor& tensor, uint64_t begin, uint64_t count) const;
  class FileHandle;  // an open, read-only file descriptor
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::shared_ptr<const FileHandle>> files_;  // by path
};

}  // namespace strata
