// The element types of safetensors files; see safetensors_format.h. The half conversions
// work on bits (no FPU rounding mode or flush-to-zero setting can change them).
#include "models/hf/safetensors_format.h"

#include <cstring>

namespace strata {

const char* StDTypeName(StDType dtype) {
  switch (dtype) {
    case StDType::kF32:
      return "F32";
    case StDType::kBF16:
      return "BF16";
    case StDType::kF16:
      return "F16";
  }
  return "?";
}

size_t StDTypeBytes(StDType dtype) { return dtype == StDType::kF32 ? 4 : 2; }

float HalfToFloat(uint16_t half_bits) {
  const uint32_t sign = static_cast<uint32_t>(half_bits & 0x8000u) << 16;
  const uint32_t exponent = (half_bits >> 10) & 0x1fu;
  uint32_t mantissa = half_bits & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mantissa * 2^-24; normalize so the leading 1 becomes implicit.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, and quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 (0x477ff000) is halfway between 65504, the largest half (odd mantissa), and 2^16:
  // it and everything above round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14): drop 13 bits, ties to even
    const uint32_t rounded = magnitude - 0x38000000u + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half: round(value * 2^24) with ties to even; 2^-25 and below round to zero.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25 (float subnormals included)
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24: value * 2^24 = mantissa >> shift
  uint32_t quotient = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (quotient & 1u))) ++quotient;
  return static_cast<uint16_t>(sign | quotient);
}

}  // namespace strata
