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
// Thread-safety: SafetensorsSet is a value (copies share the open file descriptors, closed
// with the last copy); its const methods may be called from several threads at once. The
// free functions are independent of each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata {

enum class StDType { kF32, kBF16, kF16 };

// The header's name of the dtype: "F32", "BF16", "F16".
const char* StDTypeName(StDType dtype);
// Bytes per element: 4 or 2.
size_t StDTypeBytes(StDType dtype);

// IEEE binary16 conversions. HalfToFloat is exact (subnormals, infinities, NaN payloads);
// FloatToHalf rounds to nearest even, overflows to infinity, keeps NaN a (quiet) NaN.
float HalfToFloat(uint16_t half_bits);
uint16_t FloatToHalf(float value);

struct StTensor {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  std::string file;     // path of the file holding it
  uint64_t offset = 0;  // absolute byte offset of its data in that file
  uint64_t bytes = 0;   // numel * StDTypeBytes(dtype)
};

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

// A tensor to write: its name and shape, and a producer of its elements in fp32.
struct StOutputTensor {
  std::string name;
  std::vector<int64_t> shape;
  // Fills out[0, count) with elements [begin, begin + count) (flat row-major). Called in
  // increasing order of begin, covering the tensor once, in pieces of at most 1 Mi elements
  // (4 MiB). An error stops the write (and is returned, naming the file and tensor).
  std::function<Status(uint64_t begin, uint64_t count, float* out)> fill;
};

// Writes `tensors` into one file at `path`, converted to `dtype` (F32 bit-exact; BF16 and F16
// rounded to nearest even, BF16 exactly as core/dtype.h's Store). The data is laid out in the
// given order; the header is compact JSON with sorted keys and, when `metadata` is not empty,
// a "__metadata__" map, padded with spaces so the data starts at a multiple of 8 bytes (as the
// reference implementation writes it). Written to `path` + ".partial", synced, then renamed.
// Names must be unique, not empty and not "__metadata__"; dimensions not negative.
// Note: transformers refuses a file whose "__metadata__" lacks "format": "pt"; an exporter
// for it passes {"format", "pt"} in `metadata`.
Status WriteSafetensors(const std::string& path, const std::vector<StOutputTensor>& tensors,
                        StDType dtype, const std::map<std::string, std::string>& metadata);

// Writes `tensors` into `dir` (created if missing): model.safetensors when their data is at
// most `max_shard_bytes` in total, else shards model-00001-of-0000N.safetensors ... filled in
// the given order, each closed before the next tensor would take it past `max_shard_bytes`
// of data (a tensor larger than the limit gets a shard of its own), plus
// model.safetensors.index.json: {"metadata": {"total_size": <data bytes>}, "weight_map":
// {name: shard file}}. Every shard carries `metadata`. The old index is removed first and the
// new one written last; files of these names that the new set does not use (a stale index,
// model.safetensors, or shards of an earlier split) are removed at the end, so the directory
// opens as what was written once this returns OK. Returns the paths written, index last.
StatusOr<std::vector<std::string>> WriteSafetensorsDirectory(
    const std::string& dir, const std::vector<StOutputTensor>& tensors, StDType dtype,
    uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata);

}  // namespace strata
