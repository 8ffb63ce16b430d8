// CPU rotary position embedding; see rope.h.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstddef>

#include "kernels/cpu/elementwise.h"  // STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

// Rotates one head's pairs (x_i, x_{i+half}) by the angles of one position.
template <typename Storage>
inline void RotateHead(Storage* x, const float* cos_row, const float* sin_row, int half,
                       float sign) {
  for (int i = 0; i < half; ++i) {
    const float a = Load(x + i), b = Load(x + i + half);
    const float c = cos_row[i], s = sign * sin_row[i];
    Store(x + i, a * c - b * s);
    Store(x + i + half, b * c + a * s);
  }
}

// The q and k heads (NH + NKV of them, contiguous at the row's start) of one token row.
template <typename Storage>
STRATA_CPU_SIMD_CLONES void RotateRow(Storage* row, const float* cos_row, const float* sin_row,
                                      int heads, int hs, float sign) {
  for (int h = 0; h < heads; ++h) RotateHead(row + static_cast<size_t>(h) * hs, cos_row, sin_row,
                                             hs / 2, sign);
}

}  // namespace

void RopeTable(std::vector<float>& cos_table, std::vector<float>& sin_table, int T, int hs,
               const RopeSpec& rope, int position0) {
  const int half = hs / 2;
  const std::vector<float> inv_freq = RopeInverseFrequencies(rope, hs);
  cos_table.resize(static_cast<size_t>(T) * half);
  sin_table.resize(cos_table.size());
  for (int t = 0; t < T; ++t) {
    const float position = static_cast<float>(position0 + t);
    for (int i = 0; i < half; ++i) {
      const float angle = position * inv_freq[i];
      cos_table[static_cast<size_t>(t) * half + i] = std::cos(angle);
      sin_table[static_cast<size_t>(t) * half + i] = std::sin(angle);
    }
  }
}

template <typename Storage>
void RopeReference(Storage* qkv, int B, int T, int NH, int NKV, int hs, const RopeSpec& rope,
                   int position0, int direction) {
  std::vector<float> cos_table, sin_table;
  RopeTable(cos_table, sin_table, T, hs, rope, position0);
  const int half = hs / 2;
  const size_t row_stride = static_cast<size_t>(NH + 2 * NKV) * hs;
  const float sign = direction >= 0 ? 1.0f : -1.0f;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      Storage* row = qkv + (static_cast<size_t>(b) * T + t) * row_stride;
      for (int h = 0; h < NH + NKV; ++h) {  // q heads, then k heads
        Storage* x = row + static_cast<size_t>(h) * hs;
        for (int i = 0; i < half; ++i) {
          const float c = cos_table[static_cast<size_t>(t) * half + i];
          const float s = sign * sin_table[static_cast<size_t>(t) * half + i];
          const float a = Load(x + i), bb = Load(x + i + half);
          Store(x + i, a * c - bb * s);
          Store(x + i + half, bb * c + a * s);
        }
      }
    }
  }
}

template <typename Storage>
void Rope(Storage* qkv, int B, int T, int NH, int NKV, int hs, const RopeSpec& rope, int position0,
          int direction) {
  std::vector<float> cos_table, sin_table;
  RopeTable(cos_table, sin_table, T, hs, rope, position0);
  const int half = hs / 2;
  const size_t row_stride = static_cast<size_t>(NH + 2 * NKV) * hs;
  const float sign = direction >= 0 ? 1.0f : -1.0f;
  const long rows = static_cast<long>(B) * T;
#pragma omp parallel for schedule(static) if (rows > 1)
  for (long r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    RotateRow(qkv + r * row_stride, cos_table.data() + static_cast<size_t>(t) * half,
              sin_table.data() + static_cast<size_t>(t) * half, NH + NKV, hs, sign);
  }
}

#define STRATA_INSTANTIATE(S)                                                             \
  template void RopeReference<S>(S*, int, int, int, int, int, const RopeSpec&, int, int); \
  template void Rope<S>(S*, int, int, int, int, int, const RopeSpec&, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
