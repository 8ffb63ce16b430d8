// Fuzz target: a sharded safetensors set's index (models/hf/safetensors.h,
// SafetensorsSet::OpenDirectory over model.safetensors.index.json): the input is the index;
// the directory holds three valid shards written once by the library's own writer (tensors
// a, b, c, d; the corpus's seeds are indexes of that set, right and wrong), so the fuzzer
// explores the index's checks: the weight_map against the shards, shard names that leave
// the directory or repeat, missing and extra tensors.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/fuzz_scratch.h"
#include "models/hf/safetensors.h"

namespace {

// The shards' directory, written on first use: 4 tensors of 64 bytes or less each, split
// into shards of at most 64 bytes of data.
const std::string& ShardDirectory() {
  static const std::string* dir = [] {
    auto* path = new std::string(strata::fuzz::ScratchDir() + "/set");
    auto ramp = [](float scale) {
      return [scale](uint64_t begin, uint64_t count, float* out) {
        for (uint64_t i = 0; i < count; ++i) out[i] = scale * static_cast<float>(begin + i);
        return strata::Status();
      };
    };
    const std::vector<strata::StOutputTensor> tensors = {{"a", {4, 4}, ramp(1.0f)},
                                                         {"b", {8}, ramp(-0.5f)},
                                                         {"c", {2, 3}, ramp(0.25f)},
                                                         {"d", {3}, ramp(2.0f)}};
    auto written = strata::WriteSafetensorsDirectory(*path, tensors, strata::StDType::kF32, 64,
                                                     {{"format", "pt"}});
    if (!written.ok()) {
      std::fprintf(stderr, "fuzz harness: %s\n", written.status().ToString().c_str());
      std::abort();
    }
    return path;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string& dir = ShardDirectory();
  strata::fuzz::WriteScratchFile("set/model.safetensors.index.json", data, size);
  strata::StatusOr<strata::SafetensorsSet> set = strata::SafetensorsSet::OpenDirectory(dir);
  if (!set.ok()) return 0;
  std::vector<float> floats;
  for (const strata::StTensor& tensor : set->tensors()) {
    floats.resize(tensor.numel);
    (void)set->ReadFloats(tensor, 0, tensor.numel, floats.data());
  }
  return 0;
}
