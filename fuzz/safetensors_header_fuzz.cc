// Fuzz target: one safetensors file (models/hf/safetensors.h, SafetensorsSet::OpenFile):
// the 8-byte length, the header's JSON and every tensor entry checked against the file.
// A file that opens is then read: the first elements of each tensor (at most 16 tensors of
// 4096 elements), converted to fp32 and, for BF16, as raw values, so the checked offsets
// are exercised by real reads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_scratch.h"
#include "models/hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("model.safetensors", data, size);
  strata::StatusOr<strata::SafetensorsSet> set = strata::SafetensorsSet::OpenFile(path);
  if (!set.ok()) return 0;
  std::vector<float> floats;
  std::vector<strata::bf16> raw;
  size_t read = 0;
  for (const strata::StTensor& tensor : set->tensors()) {
    if (read++ == 16) break;
    const uint64_t count = std::min<uint64_t>(tensor.numel, 4096);
    floats.resize(count);
    (void)set->ReadFloats(tensor, 0, count, floats.data());
    if (tensor.dtype == strata::StDType::kBF16) {
      raw.resize(count);
      (void)set->ReadBf16(tensor, 0, count, raw.data(), floats.data());
    }
    if (set->Find(tensor.name) == nullptr) __builtin_trap();  // every listed tensor is found
  }
  return 0;
}
