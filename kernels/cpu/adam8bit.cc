// 8-bit AdamW on the CPU (see adam8bit.h). A block is one unit of work: a first pass decodes
// its moments, updates them and the master, writes the param copy and keeps the new m and v
// in a 2048-float scratch (in L1) with their running absmax; a second pass encodes them.
// The SIMD paths are one body (adam8bit_simd.inc) over a small vector-ops struct V (AVX2: 8
// lanes, AVX-512: 16), compiled once per instruction set under its target pragma (GCC's, or clang's attribute) and
// only ever called after ResolveCpuAdamPath confirmed the CPU has it; elements of a tail
// block beyond the last whole vector take the scalar code, which is the same arithmetic.
//
// Exactness: -ffp-contract=off (kernels/cpu/BUILD) keeps GCC from fusing the intrinsics'
// products and sums into FMAs; _mm*_div_ps and _mm*_sqrt_ps are IEEE. The absmax is
// max_ps(|x|, acc), which is "|x| > acc ? |x| : acc" as the scalar std::max(acc, |x|): a
// NaN never enters, so the lanes' order does not matter. The code of y is the number of
// decision points below y; the scalar reference counts it with std::lower_bound, the SIMD
// paths with an 8-step branchless binary search over the 255 points padded to 256 (the same
// count: the points are sorted; a NaN y compares false everywhere and gets code 0 in both),
// its first levels from a register (a permute) and the last ones by gathers.
// Thread-safety: the only shared mutable state is relaxed atomic counters for tests.
#include "kernels/cpu/adam8bit.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/adam_math.h"
#include "kernels/cpu/quantize.h"  // DynamicMapMidpoints

namespace strata::cpu {
namespace {

std::atomic<uint64_t> g_blocks_run[4];

// The maps and their decision points, 64-byte aligned for the gathers; midpoints[255] is
// +inf (never read by the search, which looks at indices <= 254, but keeps the table whole).
struct Tables {
  alignas(64) float map[2][256];        // [0]: unsigned, [1]: signed
  alignas(64) float midpoints[2][256];  // the same order
  // The points the first levels of the SIMD binary search probe, for an in-register look-up
  // instead of a gather: coarse16[s][m] = midpoints[s][16 m + 15] (AVX-512, 4 levels),
  // coarse8[s][m] = midpoints[s][32 m + 31] (AVX2, 3 levels).
  alignas(64) float coarse16[2][16];
  alignas(32) float coarse8[2][8];
  uint8_t zero_code[2];  // the code of 0.0: 0 unsigned, 127 signed
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    for (int s = 0; s < 2; ++s) {
      const bool is_signed = s == 1;
      for (int i = 0; i < 256; ++i) t.map[s][i] = DynamicMap(is_signed)[i];
      for (int i = 0; i < 255; ++i) t.midpoints[s][i] = DynamicMapMidpoints(is_signed)[i];
      t.midpoints[s][255] = std::numeric_limits<float>::infinity();
      for (int m = 0; m < 16; ++m) t.coarse16[s][m] = t.midpoints[s][16 * m + 15];
      for (int m = 0; m < 8; ++m) t.coarse8[s][m] = t.midpoints[s][32 * m + 31];
      t.zero_code[s] = static_cast<uint8_t>(
          std::lower_bound(t.midpoints[s], t.midpoints[s] + 255, 0.0f) - t.midpoints[s]);
    }
    return t;
  }();
  return tables;
}

// #{i < 255 : y > midpoints[i]}.
inline uint8_t CodeOf(float y, const float* midpoints) {
  return static_cast<uint8_t>(std::lower_bound(midpoints, midpoints + 255, y) - midpoints);
}

// The scalar update of element i, decoded moments given; returns the new master and writes the
// new moments. Operation for operation as AdamUpdate in kernels/cpu/adamw.cc.
inline __attribute__((always_inline)) float UpdateScalar(float m_old, float v_old, float grad,
                                                         float p, const AdamConstants& k,
                                                         float* m_new, float* v_new) {
  const float g = grad * k.grad_scale;
  const float m = k.beta1 * m_old + k.one_minus_beta1 * g;
  const float v = k.beta2 * v_old + k.one_minus_beta2 * g * g;
  const float m_hat = m / k.bias_correction1;
  const float v_hat = v / k.bias_correction2;
  *m_new = m;
  *v_new = v;
  return p - k.lr * (m_hat / (std::sqrt(v_hat) + k.eps) + k.weight_decay * p);
}

// The arrays of one block, already offset to it.
struct BlockArgs {
  void* param;  // offset by the caller's element type; null: skipped
  float* master;
  const float* grad;
  uint8_t* m_codes;
  float* m_absmax;
  uint8_t* v_codes;
  float* v_absmax;
  size_t len;  // 1..kAdamStateBlock
};

template <typename T>
inline void StoreParam(void* param, size_t i, float value) {
  if constexpr (std::is_same_v<T, float>) {
    static_cast<float*>(param)[i] = value;
  } else {
    static_cast<bf16*>(param)[i] = ToBf16(value);
  }
}

// The absmax as stored: 0 below kQuantMinAbsmax.
inline float StoredAbsmax(float max) { return max < kQuantMinAbsmax ? 0.0f : max; }

// Scalar encoding of x[0, len) against absmax (already StoredAbsmax'ed).
inline void EncodeScalar(const float* x, size_t len, float absmax, int s, const Tables& t,
                         uint8_t* codes) {
  if (absmax == 0.0f) {
    std::memset(codes, t.zero_code[s], len);
    return;
  }
  const float r = 1.0f / absmax;
  for (size_t i = 0; i < len; ++i) codes[i] = CodeOf(x[i] * r, t.midpoints[s]);
}

template <typename T>
void StepBlockReference(const BlockArgs& a, const AdamConstants& k, const Tables& t) {
  float m_new[kAdamStateBlock], v_new[kAdamStateBlock];
  const float m_scale = *a.m_absmax, v_scale = *a.v_absmax;
  float m_max = 0.0f, v_max = 0.0f;
  for (size_t i = 0; i < a.len; ++i) {
    const float m_old = t.map[1][a.m_codes[i]] * m_scale;
    const float v_old = t.map[0][a.v_codes[i]] * v_scale;
    const float p_new = UpdateScalar(m_old, v_old, a.grad[i], a.master[i], k, &m_new[i], &v_new[i]);
    a.master[i] = p_new;
    if (a.param != nullptr) StoreParam<T>(a.param, i, p_new);
    m_max = std::max(m_max, std::fabs(m_new[i]));
    v_max = std::max(v_max, std::fabs(v_new[i]));
  }
  *a.m_absmax = StoredAbsmax(m_max);
  *a.v_absmax = StoredAbsmax(v_max);
  EncodeScalar(m_new, a.len, *a.m_absmax, 1, t, a.m_codes);
  EncodeScalar(v_new, a.len, *a.v_absmax, 0, t, a.v_codes);
}

// ---------------------------------------------------------------------------------------
// SIMD: adam8bit_simd.inc, the block pass over a vector-ops struct V, compiled twice, each
// time with its instruction set as the target of every function in it (GCC refuses to inline
// target-specific intrinsics into a function of another target, so the generic body cannot
// simply be an always_inline template called from two targets).

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
namespace avx2 {
struct V {
  static constexpr size_t kLanes = 8;
  using F = __m256;
  using I = __m256i;
  static const float* Coarse(const Tables& t, int s) { return t.coarse8[s]; }
  static inline F Set(float x) { return _mm256_set1_ps(x); }
  static inline F Load(const float* p) { return _mm256_loadu_ps(p); }
  static inline void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static inline F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static inline F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static inline F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static inline F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static inline F Sqrt(F a) { return _mm256_sqrt_ps(a); }
  static inline F Abs(F a) {
    return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  }
  // a > b ? a : b per lane.
  static inline F Max(F a, F b) { return _mm256_max_ps(a, b); }
  static inline float ReduceMax(F a) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, a);
    float max = 0.0f;
    for (float x : lanes) max = std::max(max, x);
    return max;
  }
  // map[codes[0..7]].
  static inline F Decode(const uint8_t* codes, const float* map) {
    const I index = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
    return _mm256_i32gather_ps(map, index, 4);
  }
  // codes[0..7] = #{i : y > midpoints[i]} (binary search; see the file comment). The first
  // 3 levels (steps 128, 64, 32) probe only points 32 m + 31: a permute of `coarse`, q = pos / 32.
  static inline void Encode(F y, const float* midpoints, const float* coarse, uint8_t* codes) {
    const F coarse_points = _mm256_load_ps(coarse);
    I q = _mm256_setzero_si256();
    for (int s = 4; s >= 1; s /= 2) {
      const F point =
          _mm256_permutevar8x32_ps(coarse_points, _mm256_add_epi32(q, _mm256_set1_epi32(s - 1)));
      const I above = _mm256_castps_si256(_mm256_cmp_ps(y, point, _CMP_GT_OQ));
      q = _mm256_add_epi32(q, _mm256_and_si256(above, _mm256_set1_epi32(s)));
    }
    I pos = _mm256_slli_epi32(q, 5);
    for (int step = 16; step >= 1; step /= 2) {
      const F point =
          _mm256_i32gather_ps(midpoints, _mm256_add_epi32(pos, _mm256_set1_epi32(step - 1)), 4);
      const I above = _mm256_castps_si256(_mm256_cmp_ps(y, point, _CMP_GT_OQ));
      pos = _mm256_add_epi32(pos, _mm256_and_si256(above, _mm256_set1_epi32(step)));
    }
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(pos), _mm256_extracti128_si256(pos, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes), _mm_packus_epi16(words, words));
  }
};
#include "kernels/cpu/adam8bit_simd.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
namespace avx512 {
struct V {
  static constexpr size_t kLanes = 16;
  using F = __m512;
  using I = __m512i;
  static const float* Coarse(const Tables& t, int s) { return t.coarse16[s]; }
  static inline F Set(float x) { return _mm512_set1_ps(x); }
  static inline F Load(const float* p) { return _mm512_loadu_ps(p); }
  static inline void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static inline F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static inline F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static inline F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static inline F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static inline F Sqrt(F a) { return _mm512_sqrt_ps(a); }
  static inline F Abs(F a) { return _mm512_abs_ps(a); }
  static inline F Max(F a, F b) { return _mm512_max_ps(a, b); }
  static inline float ReduceMax(F a) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, a);
    float max = 0.0f;
    for (float x : lanes) max = std::max(max, x);
    return max;
  }
  static inline F Decode(const uint8_t* codes, const float* map) {
    const I index = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    return _mm512_i32gather_ps(index, map, 4);
  }
  // As Avx2's, the first 4 levels (steps 128 to 16) from points 16 m + 15, q = pos / 16.
  static inline void Encode(F y, const float* midpoints, const float* coarse, uint8_t* codes) {
    const F coarse_points = _mm512_load_ps(coarse);
    I q = _mm512_setzero_si512();
    for (int s = 8; s >= 1; s /= 2) {
      const F point =
          _mm512_permutexvar_ps(_mm512_add_epi32(q, _mm512_set1_epi32(s - 1)), coarse_points);
      const __mmask16 above = _mm512_cmp_ps_mask(y, point, _CMP_GT_OQ);
      q = _mm512_mask_add_epi32(q, above, q, _mm512_set1_epi32(s));
    }
    I pos = _mm512_slli_epi32(q, 4);
    for (int step = 8; step >= 1; step /= 2) {
      const F point =
          _mm512_i32gather_ps(_mm512_add_epi32(pos, _mm512_set1_epi32(step - 1)), midpoints, 4);
      const __mmask16 above = _mm512_cmp_ps_mask(y, point, _CMP_GT_OQ);
      pos = _mm512_mask_add_epi32(pos, above, pos, _mm512_set1_epi32(step));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtepi32_epi8(pos));
  }
};
#include "kernels/cpu/adam8bit_simd.inc"
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

template <typename T>
using BlockFn = void (*)(const BlockArgs&, const AdamConstants&, const Tables&);

template <typename T>
BlockFn<T> BlockFunction(CpuAdamPath path) {
  switch (path) {
    case CpuAdamPath::kAvx512:
      return &avx512::StepBlock<T>;
    case CpuAdamPath::kAvx2:
      return &avx2::StepBlock<T>;
    default:
      return &StepBlockReference<T>;
  }
}

template <typename T>
BlockArgs ArgsOfBlock(T* param, float* master, const float* grad, uint8_t* m_codes, float* m_absmax,
                      uint8_t* v_codes, float* v_absmax, size_t n, size_t b) {
  const size_t begin = b * kAdamStateBlock;
  return {param != nullptr ? static_cast<void*>(param + begin) : nullptr,
          master + begin,
          grad + begin,
          m_codes + begin,
          m_absmax + b,
          v_codes + begin,
          v_absmax + b,
          std::min(n - begin, kAdamStateBlock)};
}

template <typename T>
void StepAll(CpuAdamPath path, int threads, T* param, float* master, const float* grad,
             uint8_t* m_codes, float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
             const AdamConstants& k) {
  const Tables& t = GetTables();
  const BlockFn<T> step = BlockFunction<T>(path);
  const size_t blocks = Adam8bitBlocks(n);
  threads = static_cast<int>(std::max<size_t>(1, std::min<size_t>(threads, blocks)));
  const long long count = static_cast<long long>(blocks);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (long long b = 0; b < count; ++b) {
    step(ArgsOfBlock(param, master, grad, m_codes, m_absmax, v_codes, v_absmax, n,
                     static_cast<size_t>(b)),
         k, t);
  }
  g_blocks_run[static_cast<int>(path)].fetch_add(blocks, std::memory_order_relaxed);
}

}  // namespace

Status Adam8bitStep(const Adam8bitOptions& options, DType param_dtype, void* param, float* master,
                    const float* grad, uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
                    float* v_absmax, size_t n, const AdamParams& hp) {
  if (hp.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW8bit: step=", hp.step, " (1-based, for bias correction)"));
  }
  ASSIGN_OR_RETURN(const CpuAdamPath path, ResolveCpuAdamPath(options.path));
  if (n == 0) return absl::OkStatus();
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  const AdamConstants k = MakeAdamConstants(hp);
  if (param_dtype == DType::kF32) {
    StepAll(path, threads, static_cast<float*>(param), master, grad, m_codes, m_absmax, v_codes,
            v_absmax, n, k);
  } else {
    StepAll(path, threads, static_cast<bf16*>(param), master, grad, m_codes, m_absmax, v_codes,
            v_absmax, n, k);
  }
  return absl::OkStatus();
}

template <typename T>
void Adam8bitReference(T* param, float* master, const float* grad, uint8_t* m_codes,
                       float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                       const AdamParams& hp) {
  const AdamConstants k = MakeAdamConstants(hp);
  const Tables& t = GetTables();
  for (size_t b = 0; b < Adam8bitBlocks(n); ++b) {
    StepBlockReference<T>(
        ArgsOfBlock(param, master, grad, m_codes, m_absmax, v_codes, v_absmax, n, b), k, t);
  }
}

template void Adam8bitReference<float>(float*, float*, const float*, uint8_t*, float*, uint8_t*,
                                       float*, size_t, const AdamParams&);
template void Adam8bitReference<bf16>(bf16*, float*, const float*, uint8_t*, float*, uint8_t*,
                                      float*, size_t, const AdamParams&);

void QuantizeMoments(const float* x, size_t n, bool is_signed, uint8_t* codes, float* absmax) {
  const Tables& t = GetTables();
  const int s = is_signed ? 1 : 0;
  for (size_t b = 0; b < Adam8bitBlocks(n); ++b) {
    const size_t begin = b * kAdamStateBlock, len = std::min(n - begin, kAdamStateBlock);
    float max = 0.0f;
    for (size_t i = 0; i < len; ++i) max = std::max(max, std::fabs(x[begin + i]));
    absmax[b] = StoredAbsmax(max);
    EncodeScalar(x + begin, len, absmax[b], s, t, codes + begin);
  }
}

void DequantizeMoments(const uint8_t* codes, const float* absmax, size_t n, bool is_signed,
                       float* out) {
  const float* map = GetTables().map[is_signed ? 1 : 0];
  for (size_t i = 0; i < n; ++i) out[i] = map[codes[i]] * absmax[i / kAdamStateBlock];
}

uint64_t Adam8bitBlocksRunForTesting(CpuAdamPath path) {
  return g_blocks_run[static_cast<int>(path)].load(std::memory_order_relaxed);
}

}  // namespace strata::cpu
