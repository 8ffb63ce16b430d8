// The tables of quant_format.h: the NF4 values and the 8-bit dynamic map. Both are built
// once (function-local statics, thread-safe initialisation) and never change.
// docs/quantization.md is their specification; tools/quant_reference.py builds them again
// from it and //kernels/cpu:quantize_fixture_test compares the two exactly.
#include "core/quant_format.h"

#include <algorithm>
#include <cstdint>

namespace strata {

const std::array<float, 16>& Nf4Values() {
  // QLoRA's NF4 (Dettmers et al. 2023, as bitsandbytes stores them): the quantiles of a
  // standard normal, rescaled to [-1, 1], with an exact 0.
  static const std::array<float, 16> kValues = {
      -1.0f,
      -0.6961928009986877f,
      -0.5250730514526367f,
      -0.39491748809814453f,
      -0.28444138169288635f,
      -0.18477343022823334f,
      -0.09105003625154495f,
      0.0f,
      0.07958029955625534f,
      0.16093020141124725f,
      0.24611230194568634f,
      0.33791524171829224f,
      0.44070982933044434f,
      0.5626170039176941f,
      0.7229568362236023f,
      1.0f,
  };
  return kValues;
}

namespace {

// The dynamic map of Dettmers et al. 2022 ("8-bit optimizers via block-wise quantization",
// 7 exponent bits, 8 bits in all). For each decade i = 0..6, k = 2^i + 1 (signed) or
// 2^(i+1) + 1 (unsigned) boundaries linearly spaced in [0.1, 1], b_j = 0.1 + 0.9 j / (k-1);
// the k-1 midpoints (b_j + b_{j+1}) / 2 are scaled by 10^(i-6), and negated too when signed;
// then 0 and 1. Signed: 2 * 127 + 2 values; unsigned: 254 + 2. In exact arithmetic a value
// is (2(k-1) + 9(2j+1)) / (20 (k-1) 10^(6-i)): numerator and denominator are integers below
// 2^53, so one double division rounds it, and the cast to float rounds once more.
std::array<float, 256> BuildDynamicMap(bool is_signed) {
  std::array<float, 256> map{};
  size_t count = 0;
  int64_t power_of_ten = 1000000;  // 10^(6 - i)
  for (int i = 0; i < 7; ++i, power_of_ten /= 10) {
    const int64_t intervals = is_signed ? (int64_t{1} << i) : (int64_t{1} << (i + 1));  // k - 1
    for (int64_t j = 0; j < intervals; ++j) {
      const int64_t numerator = 2 * intervals + 9 * (2 * j + 1);
      const int64_t denominator = 20 * intervals * power_of_ten;
      const float value =
          static_cast<float>(static_cast<double>(numerator) / static_cast<double>(denominator));
      map[count++] = value;
      if (is_signed) map[count++] = -value;
    }
  }
  map[count++] = 0.0f;
  map[count++] = 1.0f;
  std::sort(map.begin(), map.begin() + count);
  return map;
}

}  // namespace

const std::array<float, 256>& DynamicMap(bool is_signed) {
  static const std::array<float, 256> kSigned = BuildDynamicMap(true);
  static const std::array<float, 256> kUnsigned = BuildDynamicMap(false);
  return is_signed ? kSigned : kUnsigned;
}

}  // namespace strata
