// See transpose.h.
#include "kernels/cpu/transpose.h"

#include <immintrin.h>

namespace strata::cpu {

void TransposeReference(const float* source, size_t source_stride, size_t rows, size_t cols,
                        float* dest, size_t dest_stride) {
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) dest[j * dest_stride + i] = source[i * source_stride + j];
  }
}

void TransposeReference(const bf16* source, size_t source_stride, size_t rows, size_t cols,
                        float* dest, size_t dest_stride) {
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) {
      dest[j * dest_stride + i] = ToFloat(source[i * source_stride + j]);
    }
  }
}

namespace {

// Eight loaded rows of a tile (r0..r7) transposed into d (row stride ds): pairs
// interleaved, quads shuffled, halves exchanged, eight rows stored.
__attribute__((target("avx"), always_inline)) inline void StoreTransposed8(__m256 r0, __m256 r1,
                                                                           __m256 r2, __m256 r3,
                                                                           __m256 r4, __m256 r5,
                                                                           __m256 r6, __m256 r7,
                                                                           float* d, size_t ds) {
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// The 8x8 tile at s (row stride ss) transposed into d (row stride ds).
__attribute__((target("avx"), always_inline)) inline void Tile8(const float* s, size_t ss, float* d,
                                                                size_t ds) {
  StoreTransposed8(_mm256_loadu_ps(s), _mm256_loadu_ps(s + ss), _mm256_loadu_ps(s + 2 * ss),
                   _mm256_loadu_ps(s + 3 * ss), _mm256_loadu_ps(s + 4 * ss),
                   _mm256_loadu_ps(s + 5 * ss), _mm256_loadu_ps(s + 6 * ss),
                   _mm256_loadu_ps(s + 7 * ss), d, ds);
}

// Eight bf16 values widened to fp32: each one's bits in the top half of a 32-bit lane.
__attribute__((target("avx2"), always_inline)) inline __m256 LoadBf16x8(const bf16* p) {
  const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

__attribute__((target("avx2"), always_inline)) inline void Tile8(const bf16* s, size_t ss, float* d,
                                                                 size_t ds) {
  StoreTransposed8(LoadBf16x8(s), LoadBf16x8(s + ss), LoadBf16x8(s + 2 * ss),
                   LoadBf16x8(s + 3 * ss), LoadBf16x8(s + 4 * ss), LoadBf16x8(s + 5 * ss),
                   LoadBf16x8(s + 6 * ss), LoadBf16x8(s + 7 * ss), d, ds);
}

// Bands of 8 source columns (= 8 destination rows, which the next tile of the band
// completes in L1), tiles along the source rows; the ragged edges element by element.
__attribute__((target("avx"))) void TransposeAvx(const float* source, size_t source_stride,
                                                 size_t rows, size_t cols, float* dest,
                                                 size_t dest_stride) {
  size_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    size_t i = 0;
    for (; i + 8 <= rows; i += 8) {
      Tile8(source + i * source_stride + j, source_stride, dest + j * dest_stride + i,
            dest_stride);
    }
    TransposeReference(source + i * source_stride + j, source_stride, rows - i, 8,
                       dest + j * dest_stride + i, dest_stride);
  }
  TransposeReference(source + j, source_stride, rows, cols - j, dest + j * dest_stride,
                     dest_stride);
}

__attribute__((target("avx2"))) void TransposeAvx2(const bf16* source, size_t source_stride,
                                                   size_t rows, size_t cols, float* dest,
                                                   size_t dest_stride) {
  size_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    size_t i = 0;
    for (; i + 8 <= rows; i += 8) {
      Tile8(source + i * source_stride + j, source_stride, dest + j * dest_stride + i, dest_stride);
    }
    TransposeReference(source + i * source_stride + j, source_stride, rows - i, 8,
                       dest + j * dest_stride + i, dest_stride);
  }
  TransposeReference(source + j, source_stride, rows, cols - j, dest + j * dest_stride,
                     dest_stride);
}

}  // namespace

void Transpose(const bf16* source, size_t source_stride, size_t rows, size_t cols, float* dest,
               size_t dest_stride) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    TransposeAvx2(source, source_stride, rows, cols, dest, dest_stride);
  } else {
    TransposeReference(source, source_stride, rows, cols, dest, dest_stride);
  }
}

void Transpose(const float* source, size_t source_stride, size_t rows, size_t cols, float* dest,
               size_t dest_stride) {
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx) {
    TransposeAvx(source, source_stride, rows, cols, dest, dest_stride);
  } else {
    TransposeReference(source, source_stride, rows, cols, dest, dest_stride);
  }
}

}  // namespace strata::cpu
