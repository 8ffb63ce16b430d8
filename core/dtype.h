// Element types of training state. `bf16` is a 16-bit brain float stored as raw bits;
// conversions round to nearest even (NaN stays NaN). Compute always happens in fp32;
// bf16 is a storage format, as on a GPU. Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/status.h"

namespace strata {

struct bf16 {
  uint16_t bits;
};

inline float ToFloat(bf16 value) {
  uint32_t widened = static_cast<uint32_t>(value.bits) << 16;
  float out;
  std::memcpy(&out, &widened, sizeof(out));
  return out;
}

inline bf16 ToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((bits >> 16) | 0x40)};
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return bf16{static_cast<uint16_t>((bits + rounding) >> 16)};
}

// Loads/stores that let kernels be written once for float and bf16 storage.
inline float Load(const float* p) { return *p; }
inline float Load(const bf16* p) { return ToFloat(*p); }
inline void Store(float* p, float v) { *p = v; }
inline void Store(bf16* p, float v) { *p = ToBf16(v); }

enum class DType { kF32, kBF16 };

inline size_t DTypeBytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }
inline const char* DTypeName(DType dtype) { return dtype == DType::kF32 ? "fp32" : "bf16"; }

inline StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "fp32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected fp32 or bf16)"));
}

}  // namespace strata
