// CPU elementwise kernels of kernels/ops.h: GELU forward/backward, residual add, gradient
// accumulation (compute dtype and into fp32), the LoRA column-slice update and LoRA dropout,
// casts between fp32 and the compute dtype, and the fp64-accumulated sum of squares used by
// global-norm clipping. Each op has a plain reference (`...Reference`, the specification)
// and a fast version (OpenMP over chunks or rows, vectorisable inner loops compiled for
// AVX-512 / AVX2 / baseline and chosen at run time).
// T is the storage type, float or bf16; arithmetic is fp32 (fp64 for SumSquares), bf16 is
// rounded to nearest even once per stored element.
//
// Also the vector-math helpers the other CPU kernels share (ExpApprox).
//
// Backward outputs ACCUMULATE (+=), as every backward op of kernels/ops.h. Add's `out` may
// alias `a` or `b`, Dropout's `out` may be its `in`; other outputs must not overlap their
// inputs.
// Thread-safety: reentrant; fast versions run an OpenMP parallel region on the calling
// thread's pool (size: omp_get_max_threads()), references run on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

// Compiles a function three times (AVX-512, AVX2+FMA, baseline x86-64) and picks one when
// the program loads, from what the CPU supports; never from the build machine. Put it on
// hot, non-inlined span/row functions (an OpenMP region's outlined body is not cloned).
// A build may predefine it (e.g. empty) to test one code path on a CPU that has all three.
#ifndef STRATA_CPU_SIMD_CLONES
#define STRATA_CPU_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

namespace strata::cpu {

// e^x in fp32 without calls or branches, so loops over it vectorise: Cody-Waite reduction
// x = n*ln2 + r (|r| <= ln2/2), Cephes' degree-5 polynomial for e^r, 2^n built in the
// exponent bits. Relative error below 1.5e-7 (measured 8e-8) for -87 <= x <= 88; 0 below
// -87 (where e^x is under FLT_MIN), saturates at e^88 above 88; NaN in, NaN out.
inline float ExpApprox(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // ln2 split so that n*kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float clamped = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float shifted = clamped * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  // Unsigned bit arithmetic: defined (wrapping) even for the garbage bits of a NaN input.
  uint32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  uint32_t magic_bits;
  std::memcpy(&magic_bits, &kRoundMagic, sizeof(magic_bits));
  const uint32_t n_int = shifted_bits - magic_bits;  // n, two's complement
  const float r = (clamped - n * kLn2High) - n * kLn2Low;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const float exp_r = (poly * r) * r + r + 1.0f;
  const uint32_t scale_bits = (n_int + 127u) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  const float result = exp_r * scale;
  return x < -87.0f ? 0.0f : result;
}

// GELU, tanh approximation with GPT-2's constants:
// out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
template <typename T>
void GeluForwardReference(T* out, const T* inp, size_t n);
template <typename T>
void GeluForward(T* out, const T* inp, size_t n);
// dinp += gelu'(inp) * dout.
template <typename T>
void GeluBackwardReference(T* dinp, const T* inp, const T* dout, size_t n);
template <typename T>
void GeluBackward(T* dinp, const T* inp, const T* dout, size_t n);

// out = a + b; out may alias a or b.
template <typename T>
void AddReference(T* out, const T* a, const T* b, size_t n);
template <typename T>
void Add(T* out, const T* a, const T* b, size_t n);

// dst += src.
template <typename T>
void AccumulateReference(T* dst, const T* src, size_t n);
template <typename T>
void Accumulate(T* dst, const T* src, size_t n);

// The LoRA column-slice ops (kernels/ops.h AddScaledColumns / ScaledColumns), over N rows:
// dst[i, col + j] += alpha * src[i, j] for j < n (dst rows of dst_cols elements, src rows of
// n), and its backward dst[i, j] = alpha * src[i, col + j] (src rows of src_cols, dst rows of
// n; overwrites). col + n <= the row width. fp32 product, then the add, one rounding per
// stored element; the fast versions are bit-identical to the references (see elementwise.cc).
template <typename T>
void AddScaledColumnsReference(T* dst, int dst_cols, int col, const T* src, int N, int n,
                               float alpha);
template <typename T>
void AddScaledColumns(T* dst, int dst_cols, int col, const T* src, int N, int n, float alpha);
template <typename T>
void ScaledColumnsReference(T* dst, const T* src, int src_cols, int col, int N, int n,
                            float alpha);
template <typename T>
void ScaledColumns(T* dst, const T* src, int src_cols, int col, int N, int n, float alpha);

// Dropout (kernels/ops.h Dropout) over N rows of C channels, T positions per sample row, the
// first row being global sample row row0: out[i, c] = keep ? in[i, c] / (1 - p) : 0, or
// out[i, c] += that when accumulate; keep is DropoutKeep(key, row0 + i / T, i % T, c, p) of
// kernels/dropout_mask.h. fp32 quotient (and sum), one rounding per stored element; the fast
// version (parallel over rows, the row's hash computed once per row) is bit-identical to the
// reference. out may be in (in place). T_len is the op's T: p in [0, 1), T_len >= 1 and
// N, C, row0 >= 0.
template <typename T>
void DropoutReference(T* out, const T* in, int N, int C, int T_len, int64_t row0, float p,
                      uint64_t key, bool accumulate);
template <typename T>
void Dropout(T* out, const T* in, int N, int C, int T_len, int64_t row0, float p, uint64_t key,
             bool accumulate);

// dst (fp32) += src (storage type).
template <typename T>
void AccumulateToFloatReference(float* dst, const T* src, size_t n);
template <typename T>
void AccumulateToFloat(float* dst, const T* src, size_t n);

// dst = src, rounded to nearest even when T is bf16.
template <typename T>
void CastFromFloatReference(T* dst, const float* src, size_t n);
template <typename T>
void CastFromFloat(T* dst, const float* src, size_t n);

// dst (fp32) = src.
template <typename T>
void CastToFloatReference(float* dst, const T* src, size_t n);
template <typename T>
void CastToFloat(float* dst, const T* src, size_t n);

// *result = sum of x[i]^2, accumulated in fp64 and rounded to fp32 once. The fast version
// sums fixed-size chunks and then the chunk sums in order, so its result does not depend
// on the thread count.
void SumSquaresReference(float* result, const float* x, size_t n);
void SumSquares(float* result, const float* x, size_t n);

}  // namespace strata::cpu
