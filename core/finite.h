// Finding values that are not finite (NaN, +-inf) in weights as they are read: a model
// whose files hold one cannot be trained (the first step's loss is NaN, which looks like a
// learning rate too high) or sampled (every logit NaN), so the importers refuse it naming
// the tensor and the element. The scan runs over the bits, in blocks a compiler vectorises,
// at memory speed; only a block that holds one is searched element by element.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/dtype.h"

namespace strata {

namespace finite_internal {
inline bool NonFiniteBits(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }
inline bool NonFiniteBits(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u; }
inline uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
inline uint16_t BitsOf(bf16 value) { return value.bits; }
}  // namespace finite_internal

// The index of the first of values[0, count) that is NaN or infinite; count when none is.
template <typename T>
size_t FirstNonFinite(const T* values, size_t count) {
  using finite_internal::BitsOf;
  using finite_internal::NonFiniteBits;
  constexpr size_t kBlock = 1024;
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t end = begin + kBlock < count ? begin + kBlock : count;
    bool any = false;
    for (size_t i = begin; i < end; ++i) any |= NonFiniteBits(BitsOf(values[i]));
    if (!any) continue;
    for (size_t i = begin; i < end; ++i) {
      if (NonFiniteBits(BitsOf(values[i]))) return i;
    }
  }
  return count;
}

// "NaN", "inf" or "-inf" for a value that is not finite (else its decimal).
inline std::string NonFiniteName(float value) {
  if (value != value) return "NaN";
  if (value == __builtin_inff()) return "inf";
  if (value == -__builtin_inff()) return "-inf";
  return std::to_string(value);
}

}  // namespace strata
