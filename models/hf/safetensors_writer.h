// Writing Hugging Face safetensors files: one file, or a directory of model.safetensors or
// shards with an index. Part of safetensors.h's API (it includes this header); see there for
// the format.
// Invariants: the writers never leave a half-written file under the final name: they write
// `<path>.partial`, sync it, then rename; a directory opens as what was written once
// WriteSafetensorsDirectory returns OK. Errors name the file (or directory) and the tensor.
// Thread-safety: the functions are independent of each other; two must not write the same
// path at once. A tensor's fill is called on the writing thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/hf/safetensors_format.h"

namespace strata {

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
