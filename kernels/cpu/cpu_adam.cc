// CPU AdamW kernels (see cpu_adam.h). Each path is a "span" function that updates one
// contiguous range; Step splits the array into one range per OpenMP thread and calls the
// span chosen at Create. SIMD spans are compiled for their instruction set with target
// attributes and only ever called after __builtin_cpu_supports confirmed it.
//
// Exactness: the library is compiled with -ffp-contract=off (kernels/cpu/BUILD), because
// GCC implements _mm512_mul_ps and friends as generic vector arithmetic and would otherwise
// fuse a multiply and an add into an FMA, which rounds once instead of twice and breaks the
// bit-for-bit agreement with the scalar reference. Division and square root are the IEEE
// instructions, except that the AVX-512 path divides half of its vectors by the two bias
// corrections with a proven-exact FMA sequence (DivideByConstant), to take load off the
// divider; FMA appears nowhere else.
//
// Thread-safety: the only shared mutable state is relaxed atomic counters for tests.
#include "kernels/cpu/cpu_adam.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/adam_math.h"

namespace strata::cpu {
namespace {

// Every thread's range starts at a multiple of this many elements: 256 bytes of fp32 and
// 128 bytes of bf16, so with 64-byte aligned arrays no cache line is shared by two threads.
constexpr size_t kRangeAlignElements = 64;

// Which compute-dtype copy a span writes.
enum class Out { kNone, kF32, kBf16 };

std::atomic<uint64_t> g_spans_run[4];
std::atomic<uint64_t> g_bf16_instruction_spans;

void CountSpan(CpuAdamPath path) {
  g_spans_run[static_cast<int>(path)].fetch_add(1, std::memory_order_relaxed);
}

// The per-call constants: the shared ones (kernels/adam_math.h, as the reference computes
// them) and what the AVX-512 path's FMA division adds.
struct Constants : AdamConstants {
  // RN(1 / bias_correction): exact division by multiplication (see DivideByConstant).
  float inverse_bias_correction1, inverse_bias_correction2;
  // Whether both bias corrections lie in [2^-20, 1], where DivideByConstant is proven exact.
  bool fma_division_exact;
};

Constants MakeConstants(const AdamParams& hp) {
  Constants k;
  static_cast<AdamConstants&>(k) = MakeAdamConstants(hp);
  k.inverse_bias_correction1 = 1.0f / k.bias_correction1;
  k.inverse_bias_correction2 = 1.0f / k.bias_correction2;
  constexpr float kMinBiasCorrection = 0x1p-20f;
  k.fma_division_exact = k.bias_correction1 >= kMinBiasCorrection && k.bias_correction1 <= 1.0f &&
                         k.bias_correction2 >= kMinBiasCorrection && k.bias_correction2 <= 1.0f;
  return k;
}

// ---------------------------------------------------------------------------------------
// Scalar: the specification, operation for operation as AdamUpdate in adamw.cc.

template <Out kOut>
inline __attribute__((always_inline)) void UpdateScalar(void* param, float* master,
                                                        const float* grad, float* m, float* v,
                                                        size_t i, const Constants& k) {
  const float g = grad[i] * k.grad_scale;
  const float m_new = k.beta1 * m[i] + k.one_minus_beta1 * g;
  const float v_new = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
  const float m_hat = m_new / k.bias_correction1;
  const float v_hat = v_new / k.bias_correction2;
  const float p = master[i];
  const float p_new = p - k.lr * (m_hat / (std::sqrt(v_hat) + k.eps) + k.weight_decay * p);
  m[i] = m_new;
  v[i] = v_new;
  master[i] = p_new;
  if constexpr (kOut == Out::kF32) static_cast<float*>(param)[i] = p_new;
  if constexpr (kOut == Out::kBf16) static_cast<bf16*>(param)[i] = ToBf16(p_new);
}

template <Out kOut>
void SpanReference(void* param, float* master, const float* grad, float* m, float* v, size_t n,
                   const Constants& k) {
  for (size_t i = 0; i < n; ++i) UpdateScalar<kOut>(param, master, grad, m, v, i, k);
}

// ---------------------------------------------------------------------------------------
// AVX2: the reference's operations on 8 lanes, with true division (the divider keeps up with
// 256-bit vectors; the FMA division of the AVX-512 path measured slower here).

#define STRATA_AVX2 __attribute__((target("avx2")))
#define STRATA_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

struct Avx2Constants {
  __m256 lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  __m256 bias_correction1, bias_correction2;
};

STRATA_AVX2_INLINE Avx2Constants Broadcast2(const Constants& k) {
  return {_mm256_set1_ps(k.lr),
          _mm256_set1_ps(k.beta1),
          _mm256_set1_ps(k.beta2),
          _mm256_set1_ps(k.one_minus_beta1),
          _mm256_set1_ps(k.one_minus_beta2),
          _mm256_set1_ps(k.eps),
          _mm256_set1_ps(k.weight_decay),
          _mm256_set1_ps(k.grad_scale),
          _mm256_set1_ps(k.bias_correction1),
          _mm256_set1_ps(k.bias_correction2)};
}

// Exact ToBf16 of 8 lanes: round to nearest even by integer addition, NaN made quiet.
STRATA_AVX2_INLINE __m128i ToBf16Avx2(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i upper = _mm256_srli_epi32(bits, 16);
  const __m256i rounding =
      _mm256_add_epi32(_mm256_and_si256(upper, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  const __m256i quiet_nan = _mm256_or_si256(upper, _mm256_set1_epi32(0x40));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Lanes hold values < 2^16: pack within each 128-bit half, then gather the halves.
  const __m256i packed = _mm256_packus_epi32(result, result);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

template <Out kOut>
STRATA_AVX2_INLINE void UpdateAvx2(void* param, float* master, const float* grad, float* m,
                                   float* v, size_t i, const Avx2Constants& k) {
  const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), k.grad_scale);
  const __m256 m_new = _mm256_add_ps(_mm256_mul_ps(k.beta1, _mm256_loadu_ps(m + i)),
                                     _mm256_mul_ps(k.one_minus_beta1, g));
  const __m256 v_new = _mm256_add_ps(_mm256_mul_ps(k.beta2, _mm256_loadu_ps(v + i)),
                                     _mm256_mul_ps(_mm256_mul_ps(k.one_minus_beta2, g), g));
  const __m256 m_hat = _mm256_div_ps(m_new, k.bias_correction1);
  const __m256 v_hat = _mm256_div_ps(v_new, k.bias_correction2);
  const __m256 p = _mm256_loadu_ps(master + i);
  const __m256 denominator = _mm256_add_ps(_mm256_sqrt_ps(v_hat), k.eps);
  const __m256 update =
      _mm256_add_ps(_mm256_div_ps(m_hat, denominator), _mm256_mul_ps(k.weight_decay, p));
  const __m256 p_new = _mm256_sub_ps(p, _mm256_mul_ps(k.lr, update));
  _mm256_storeu_ps(m + i, m_new);
  _mm256_storeu_ps(v + i, v_new);
  _mm256_storeu_ps(master + i, p_new);
  if constexpr (kOut == Out::kF32) _mm256_storeu_ps(static_cast<float*>(param) + i, p_new);
  if constexpr (kOut == Out::kBf16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<bf16*>(param) + i), ToBf16Avx2(p_new));
  }
}

template <Out kOut>
STRATA_AVX2 void SpanAvx2(void* param, float* master, const float* grad, float* m, float* v,
                          size_t n, const Constants& k) {
  const Avx2Constants kv = Broadcast2(k);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) UpdateAvx2<kOut>(param, master, grad, m, v, i, kv);
  // The last < 8 elements: the scalar update is the same arithmetic (no contraction).
  for (; i < n; ++i) UpdateScalar<kOut>(param, master, grad, m, v, i, k);
}

// ---------------------------------------------------------------------------------------
// AVX-512. The functions carry avx512bf16 and avx512dq in their target so that
// vcvtne2ps2bf16 and vfpclassps can be used inline; GCC emits AVX512_BF16 instructions only
// for its bf16 intrinsics, which run only when kBf16Instruction is true, which Create allows
// only where the CPU has AVX512_BF16 (the path itself requires F, BW, VL and DQ).
//
// Throughput (measured on this Zen 4, one core, in cache): the reference's 3 divisions and
// square root keep the divider busy for about 30 cycles per 16 elements (vdivps zmm 6.6
// cycles, vsqrtps zmm 10.3), as slow as memory delivers the 448 bytes they need. So the loop
// takes vectors in pairs: the first divides by the bias corrections with the divider, the
// second with multiplications and FMAs (DivideByConstant, exact); the divider and the FMA
// pipes then share the work. Both orders give identical bits.

#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define STRATA_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), always_inline)) inline

struct Avx512Constants {
  __m512 lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  __m512 bias_correction1, bias_correction2, inverse_bias_correction1, inverse_bias_correction2;
};

STRATA_AVX512_INLINE Avx512Constants Broadcast512(const Constants& k) {
  return {_mm512_set1_ps(k.lr),
          _mm512_set1_ps(k.beta1),
          _mm512_set1_ps(k.beta2),
          _mm512_set1_ps(k.one_minus_beta1),
          _mm512_set1_ps(k.one_minus_beta2),
          _mm512_set1_ps(k.eps),
          _mm512_set1_ps(k.weight_decay),
          _mm512_set1_ps(k.grad_scale),
          _mm512_set1_ps(k.bias_correction1),
          _mm512_set1_ps(k.bias_correction2),
          _mm512_set1_ps(k.inverse_bias_correction1),
          _mm512_set1_ps(k.inverse_bias_correction2)};
}

// vfpclassps categories.
constexpr int kClassNan = 0x81;  // quiet or signalling NaN
constexpr int kClassDenormal = 0x20;

// Exact ToBf16 of 16 lanes by integer arithmetic, left in the upper 16 bits of each lane:
// bits + 0x7fff + (bit 16), or for NaN the bits with the quiet bit set.
STRATA_AVX512_INLINE __m512i RoundToBf16High(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, odd), _mm512_set1_epi32(0x7fff));
  return _mm512_mask_or_epi32(rounded, _mm512_fpclass_ps_mask(x, kClassNan), bits,
                              _mm512_set1_epi32(0x00400000));
}

// The upper 16 bits of each lane of `low` (elements 0-15) and `high` (16-31), in order.
STRATA_AVX512_INLINE __m512i PackHighHalves(__m512i low, __m512i high) {
  const __m512i odd_words =
      _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(low, odd_words, high);
}

// 32 elements to bf16, exactly as ToBf16. vcvtne2ps2bf16 rounds to nearest even and quiets
// NaN exactly as ToBf16 does, but treats denormal inputs as zero (measured on this machine:
// 0x007fffff gives 0x0000, ToBf16 gives 0x0080); vectors holding a denormal, which a
// training run almost never has, are converted again with the integer rounding.
template <bool kBf16Instruction>
STRATA_AVX512_INLINE __m512i ToBf16x32(__m512 low, __m512 high) {
  if constexpr (kBf16Instruction) {
    if (__builtin_expect((_mm512_fpclass_ps_mask(low, kClassDenormal) |
                          _mm512_fpclass_ps_mask(high, kClassDenormal)) == 0,
                         1)) {
      return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
    }
  }
  return PackHighHalves(RoundToBf16High(low), RoundToBf16High(high));
}

STRATA_AVX512_INLINE __m256i ToBf16x16(__m512 x) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(RoundToBf16High(x), 16));
}

// a / c, correctly rounded, for a per-call constant c in [2^-20, 1] with y = RN(1/c), by
// multiplication and FMA instead of the divider. q0 = a*y is within 1.5 ulp of a/c; one
// correction q1 = q0 + (a - c*q0)*y brings it within 1 ulp; by Markstein's theorem (y within
// half an ulp of 1/c, q1 within 1 ulp of a/c, the remainder exact by FMA) a second correction
// gives exactly RN(a/c). (One correction was already exact for every significand of a with
// 20000 random divisors, but only two are proven; the second costs about 3%.) The theorem
// needs the remainder a - c*q to be exact, which holds away from underflow and overflow
// (with c >= 2^-20 the remainder's grid stays at or above 2^-130, which the subnormals
// represent; q stays far below overflow): lanes with a nonzero |a| outside [2^-64, 2^64)
// (denormal, tiny, huge, infinite, NaN) are flagged in `unsafe` and the caller redoes them
// with true division (rare in practice; exact either way). Zero lanes are exact once a's
// sign is restored (the sequence turns -0 into +0).
STRATA_AVX512_INLINE __m512 DivideByConstant(__m512 a, __m512 c, __m512 y, __mmask16* unsafe) {
  const __m512i bits = _mm512_castps_si512(a);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nonzero = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7fffffff));
  // |a| in [2^-64, 2^64) <=> magnitude bits in [0x1f800000, 0x5f800000).
  *unsafe |= _mm512_mask_cmp_epu32_mask(nonzero,
                                        _mm512_sub_epi32(magnitude, _mm512_set1_epi32(0x1f800000)),
                                        _mm512_set1_epi32(0x40000000), _MM_CMPINT_NLT);
  __m512 q = _mm512_mul_ps(a, y);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(c, q, a), y, q);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(c, q, a), y, q);
  // q has a's sign except for a = -0; OR in the sign bit (0xF8: A | (B & C)).
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(q), bits, _mm512_set1_epi32(static_cast<int>(0x80000000u)), 0xF8));
}

struct Vector16 {
  __m512 m, v, master;
};

STRATA_AVX512_INLINE Vector16 Load16(const float* master, const float* m, const float* v,
                                     size_t i) {
  return {_mm512_loadu_ps(m + i), _mm512_loadu_ps(v + i), _mm512_loadu_ps(master + i)};
}

// The update of 16 lanes, given the loaded state and raw gradient; returns the new state.
// kFmaDivision: divide by the bias corrections with DivideByConstant.
template <bool kFmaDivision>
STRATA_AVX512_INLINE Vector16 Compute16(Vector16 old, __m512 grad, const Avx512Constants& k) {
  const __m512 g = _mm512_mul_ps(grad, k.grad_scale);
  const __m512 m_new =
      _mm512_add_ps(_mm512_mul_ps(k.beta1, old.m), _mm512_mul_ps(k.one_minus_beta1, g));
  const __m512 v_new = _mm512_add_ps(_mm512_mul_ps(k.beta2, old.v),
                                     _mm512_mul_ps(_mm512_mul_ps(k.one_minus_beta2, g), g));
  __m512 m_hat, v_hat;
  if constexpr (kFmaDivision) {
    __mmask16 unsafe = 0;
    m_hat = DivideByConstant(m_new, k.bias_correction1, k.inverse_bias_correction1, &unsafe);
    v_hat = DivideByConstant(v_new, k.bias_correction2, k.inverse_bias_correction2, &unsafe);
    if (__builtin_expect(unsafe != 0, 0)) {
      m_hat = _mm512_div_ps(m_new, k.bias_correction1);
      v_hat = _mm512_div_ps(v_new, k.bias_correction2);
    }
  } else {
    m_hat = _mm512_div_ps(m_new, k.bias_correction1);
    v_hat = _mm512_div_ps(v_new, k.bias_correction2);
  }
  const __m512 denominator = _mm512_add_ps(_mm512_sqrt_ps(v_hat), k.eps);
  const __m512 update =
      _mm512_add_ps(_mm512_div_ps(m_hat, denominator), _mm512_mul_ps(k.weight_decay, old.master));
  return {m_new, v_new, _mm512_sub_ps(old.master, _mm512_mul_ps(k.lr, update))};
}

STRATA_AVX512_INLINE void Store16(float* master, float* m, float* v, size_t i, const Vector16& x) {
  _mm512_storeu_ps(m + i, x.m);
  _mm512_storeu_ps(v + i, x.v);
  _mm512_storeu_ps(master + i, x.master);
}

// Up to 16 elements [i, i + count) with masked loads and stores (heads and tails).
template <Out kOut>
STRATA_AVX512_INLINE void UpdateMasked16(void* param, float* master, const float* grad, float* m,
                                         float* v, size_t i, size_t count,
                                         const Avx512Constants& kv) {
  const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
  const Vector16 old = {_mm512_maskz_loadu_ps(mask, m + i), _mm512_maskz_loadu_ps(mask, v + i),
                        _mm512_maskz_loadu_ps(mask, master + i)};
  const Vector16 x = Compute16<false>(old, _mm512_maskz_loadu_ps(mask, grad + i), kv);
  _mm512_mask_storeu_ps(m + i, mask, x.m);
  _mm512_mask_storeu_ps(v + i, mask, x.v);
  _mm512_mask_storeu_ps(master + i, mask, x.master);
  if constexpr (kOut == Out::kF32) {
    _mm512_mask_storeu_ps(static_cast<float*>(param) + i, mask, x.master);
  }
  if constexpr (kOut == Out::kBf16) {
    _mm256_mask_storeu_epi16(static_cast<bf16*>(param) + i, mask, ToBf16x16(x.master));
  }
}

// kFmaDivision: every second vector divides with FMAs (only where DivideByConstant is exact
// for this call's bias corrections). kStream: the param copy is written with non-temporal
// stores, after a masked head that brings it to a 64-byte boundary.
template <Out kOut, bool kBf16Instruction, bool kFmaDivision, bool kStream>
STRATA_AVX512 void SpanAvx512(void* param, float* master, const float* grad, float* m, float* v,
                              size_t n, const Constants& k) {
  const Avx512Constants kv = Broadcast512(k);
  size_t i = 0;
  if constexpr (kStream) {
    constexpr size_t kElementBytes = kOut == Out::kBf16 ? sizeof(bf16) : sizeof(float);
    const size_t misalignment = reinterpret_cast<uintptr_t>(param) % 64;
    const size_t head = std::min(n, (64 - misalignment) % 64 / kElementBytes);
    for (; i < head; i += 16) {
      UpdateMasked16<kOut>(param, master, grad, m, v, i, std::min<size_t>(16, head - i), kv);
    }
    i = head;
  }
  for (; i + 32 <= n; i += 32) {
    const Vector16 a = Compute16<false>(Load16(master, m, v, i), _mm512_loadu_ps(grad + i), kv);
    const Vector16 b =
        Compute16<kFmaDivision>(Load16(master, m, v, i + 16), _mm512_loadu_ps(grad + i + 16), kv);
    Store16(master, m, v, i, a);
    Store16(master, m, v, i + 16, b);
    if constexpr (kOut == Out::kF32) {
      float* out = static_cast<float*>(param) + i;
      if constexpr (kStream) {
        _mm512_stream_ps(out, a.master);
        _mm512_stream_ps(out + 16, b.master);
      } else {
        _mm512_storeu_ps(out, a.master);
        _mm512_storeu_ps(out + 16, b.master);
      }
    }
    if constexpr (kOut == Out::kBf16) {
      bf16* out = static_cast<bf16*>(param) + i;
      const __m512i packed = ToBf16x32<kBf16Instruction>(a.master, b.master);
      if constexpr (kStream) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out), packed);
      } else {
        _mm512_storeu_si512(out, packed);
      }
    }
  }
  for (; i < n; i += 16) {
    UpdateMasked16<kOut>(param, master, grad, m, v, i, std::min<size_t>(16, n - i), kv);
  }
  // Non-temporal stores are weakly ordered: make them visible before the range is reported
  // done.
  if constexpr (kStream) _mm_sfence();
}

// ---------------------------------------------------------------------------------------
// Dispatch.

using SpanFunction = void (*)(void*, float*, const float*, float*, float*, size_t,
                              const Constants&);

template <Out kOut, bool kStream>
SpanFunction ChooseSpan(CpuAdamPath path, bool bf16_instruction, bool fma_division) {
  switch (path) {
    case CpuAdamPath::kAvx512:
      if (kOut == Out::kBf16 && bf16_instruction) {
        return fma_division ? SpanAvx512<kOut, true, true, kStream>
                            : SpanAvx512<kOut, true, false, kStream>;
      }
      return fma_division ? SpanAvx512<kOut, false, true, kStream>
                          : SpanAvx512<kOut, false, false, kStream>;
    case CpuAdamPath::kAvx2:
      return SpanAvx2<kOut>;
    default:
      return SpanReference<kOut>;
  }
}

bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

bool CpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return CpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
}

}  // namespace

const char* CpuAdamPathName(CpuAdamPath path) {
  switch (path) {
    case CpuAdamPath::kAuto:
      return "auto";
    case CpuAdamPath::kReference:
      return "reference";
    case CpuAdamPath::kAvx2:
      return "avx2";
    case CpuAdamPath::kAvx512:
      return "avx512";
  }
  return "auto";
}

StatusOr<CpuAdamPath> ParseCpuAdamPath(const std::string& name) {
  for (CpuAdamPath path :
       {CpuAdamPath::kAuto, CpuAdamPath::kReference, CpuAdamPath::kAvx2, CpuAdamPath::kAvx512}) {
    if (name == CpuAdamPathName(path)) return path;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown CPU Adam path '", name,
                                                 "' (expected reference, avx2, avx512 or auto)"));
}

bool CpuAdamPathSupported(CpuAdamPath path) {
  __builtin_cpu_init();
  switch (path) {
    case CpuAdamPath::kAuto:
    case CpuAdamPath::kReference:
      return true;
    case CpuAdamPath::kAvx2:
      return __builtin_cpu_supports("avx2");
    case CpuAdamPath::kAvx512:
      return CpuHasAvx512();
  }
  return false;
}

CpuAdamPath BestCpuAdamPath() {
  if (CpuAdamPathSupported(CpuAdamPath::kAvx512)) return CpuAdamPath::kAvx512;
  if (CpuAdamPathSupported(CpuAdamPath::kAvx2)) return CpuAdamPath::kAvx2;
  return CpuAdamPath::kReference;
}

StatusOr<CpuAdamPath> ResolveCpuAdamPath(CpuAdamPath requested) {
  CpuAdamPath path = requested;
  std::string source = "CpuAdamOptions::path";
  if (path == CpuAdamPath::kAuto) {
    const char* env = std::getenv("STRATA_CPU_ADAM");
    if (env != nullptr && env[0] != '\0') {
      StatusOr<CpuAdamPath> parsed = ParseCpuAdamPath(env);
      if (!parsed.ok()) return Annotate(parsed.status(), "STRATA_CPU_ADAM");
      path = *parsed;
      source = "STRATA_CPU_ADAM";
    }
  }
  if (path == CpuAdamPath::kAuto) return BestCpuAdamPath();
  if (!CpuAdamPathSupported(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, " asks for the ", CpuAdamPathName(path),
                     " CPU Adam path, but this CPU lacks it; the best it supports is ",
                     CpuAdamPathName(BestCpuAdamPath()), " (or use auto)"));
  }
  return path;
}

StatusOr<CpuAdam> CpuAdam::Create(const CpuAdamOptions& options) {
  ASSIGN_OR_RETURN(const CpuAdamPath path, ResolveCpuAdamPath(options.path));
  const bool bf16_instruction =
      path == CpuAdamPath::kAvx512 && options.use_bf16_instruction && CpuHasAvx512Bf16();
  return CpuAdam(path, options.threads, bf16_instruction, options.stream_param_min_elements);
}

const char* CpuAdam::path_name() const {
  if (path_ == CpuAdamPath::kAvx512 && bf16_instruction_) return "avx512+bf16";
  return CpuAdamPathName(path_);
}

template <typename T>
Status CpuAdam::StepImpl(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                         const AdamParams& hp) const {
  if (hp.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU Adam: step must be >= 1 (1-based), got ", hp.step));
  }
  if (n == 0) return absl::OkStatus();
  if (master == nullptr || grad == nullptr || m == nullptr || v == nullptr) {
    return absl::InvalidArgumentError("CPU Adam: master, grad, m and v must not be null");
  }
  // fp32 params that are the master weights themselves need no second write.
  if (static_cast<void*>(param) == static_cast<void*>(master)) param = nullptr;
  const Constants k = MakeConstants(hp);
  const bool fma_division = k.fma_division_exact;
  const bool stream = n >= stream_param_min_elements_;
  constexpr Out kOut = std::is_same_v<T, bf16> ? Out::kBf16 : Out::kF32;
  SpanFunction span;
  if (param == nullptr) {
    span = ChooseSpan<Out::kNone, false>(path_, bf16_instruction_, fma_division);
  } else if (stream) {
    span = ChooseSpan<kOut, true>(path_, bf16_instruction_, fma_division);
  } else {
    span = ChooseSpan<kOut, false>(path_, bf16_instruction_, fma_division);
  }
  const bool counts_bf16_instruction =
      bf16_instruction_ && param != nullptr && std::is_same_v<T, bf16>;

  int threads = threads_ > 0 ? threads_ : omp_get_max_threads();
  threads = static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(threads, n / kCpuAdamMinElementsPerThread)));
  const size_t blocks = (n + kRangeAlignElements - 1) / kRangeAlignElements;
  const CpuAdamPath path = path_;
  auto run_range = [&](int index) {
    const size_t begin = std::min(n, blocks * index / threads * kRangeAlignElements);
    const size_t end = std::min(n, blocks * (index + 1) / threads * kRangeAlignElements);
    if (begin >= end) return;
    span(param == nullptr ? nullptr : param + begin, master + begin, grad + begin, m + begin,
         v + begin, end - begin, k);
    CountSpan(path);
    if (counts_bf16_instruction) g_bf16_instruction_spans.fetch_add(1, std::memory_order_relaxed);
  };
  if (threads == 1) {
    run_range(0);
  } else {
#pragma omp parallel num_threads(threads)
    {
      // The team may be smaller than asked (nested regions, thread limits): every thread
      // then takes several ranges, so each element is still updated exactly once.
      for (int index = omp_get_thread_num(); index < threads; index += omp_get_num_threads()) {
        run_range(index);
      }
    }
  }
  return absl::OkStatus();
}

Status CpuAdam::Step(float* param, float* master, const float* grad, float* m, float* v, size_t n,
                     const AdamParams& hp) const {
  return StepImpl(param, master, grad, m, v, n, hp);
}

Status CpuAdam::Step(bf16* param, float* master, const float* grad, float* m, float* v, size_t n,
                     const AdamParams& hp) const {
  return StepImpl(param, master, grad, m, v, n, hp);
}

Status CpuAdam::Step(DType dtype, void* param, float* master, const float* grad, float* m, float* v,
                     size_t n, const AdamParams& hp) const {
  if (dtype == DType::kBF16) return Step(static_cast<bf16*>(param), master, grad, m, v, n, hp);
  return Step(static_cast<float*>(param), master, grad, m, v, n, hp);
}

template <typename T>
void CpuAdamReference(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                      const AdamParams& hp) {
  const Constants k = MakeConstants(hp);
  constexpr Out kOut = std::is_same_v<T, bf16> ? Out::kBf16 : Out::kF32;
  if (param == nullptr) {
    for (size_t i = 0; i < n; ++i) UpdateScalar<Out::kNone>(nullptr, master, grad, m, v, i, k);
  } else {
    for (size_t i = 0; i < n; ++i) UpdateScalar<kOut>(param, master, grad, m, v, i, k);
  }
}

template void CpuAdamReference<float>(float*, float*, const float*, float*, float*, size_t,
                                      const AdamParams&);
template void CpuAdamReference<bf16>(bf16*, float*, const float*, float*, float*, size_t,
                                     const AdamParams&);

uint64_t CpuAdamSpansRunForTesting(CpuAdamPath path) {
  return g_spans_run[static_cast<int>(path)].load(std::memory_order_relaxed);
}

uint64_t CpuAdamBf16InstructionSpansForTesting() {
  return g_bf16_instruction_spans.load(std::memory_order_relaxed);
}

}  // namespace strata::cpu
