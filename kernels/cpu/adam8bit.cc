// 8-bit AdamW on the CPU (see adam8bit.h). A block is one unit of work: a first pass decodes
// its moments, updates them and the master, writes the param copy and keeps the new m and v
// in a 2048-float scratch (in L1) with their running absmax; a second pass encodes them.
// The SIMD paths are one body (adam8bit_simd.inc) over a small vector-ops struct V (AVX2: 8
// lanes, AVX-512: 16), compiled once per instruction set under its target pragma (GCC's, or clang's
// attribute) and only ever called after ResolveCpuAdamPath confirmed the CPU has it; elements of a
// tail block beyond the last whole vector take the scalar code, which is the same arithmetic.
//
// Exactness: -ffp-contract=off (kernels/cpu/BUILD) keeps GCC from fusing the intrinsics'
// products and sums into FMAs; _mm*_div_ps and _mm*_sqrt_ps are IEEE. The absmax is
// max_ps(|x|, acc), which is "|x| > acc ? |x| : acc" as the scalar std::max(acc, |x|): a
// NaN never enters, so the lanes' order does not matter. The code of y is the number of
// decision points below y; the scalar reference counts it with std::lower_bound, the SIMD
// paths look it up (LutCode): one gather from a table indexed by the sign and the top 16 bits
// of |y| clamped to [2^-23, 1], whose buckets hold at most one point each (checked when the
// table is built; every float pattern checked against the count by adam8bit_test's
// exhaustive case), then one integer compare of the low 16 bits (a NaN y gets code 0 as in
// the reference). The AVX-512 decode looks the map up from registers (vpermi2ps over 8
// 32-entry pairs, then blends by the code's top 3 bits) instead of a gather, which measured
// 2x slower on Zen 4; AVX2 decodes by a gather. The bf16 param copy is written in the
// vector loop with ToBf16's integer rounding, lane for lane.
// Thread-safety: the only shared mutable state is relaxed atomic counters for tests.
#include "kernels/cpu/adam8bit.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/adam_math.h"
#include "kernels/cpu/quantize.h"  // DynamicMapMidpoints

namespace strata::cpu {
namespace {

std::atomic<uint64_t> g_blocks_run[4];

// The encoding by look-up (LutCode below): |y| clamped to [2^-23, 1.0] (every point's
// magnitude is in [1.6e-7, 0.9983], so the clamping moves no value across a point), bucketed
// by the top 16 bits of its float (sign apart): every bucket holds at most one decision point
// of either map (checked when the table is built, and by adam8bit_test), so the code is the
// count of points below the bucket plus one comparison of the low 16 bits.
constexpr uint32_t kLutLow = 0x34000000u;   // 2^-23
constexpr uint32_t kLutHigh = 0x3f800000u;  // 1.0
constexpr uint32_t kLutBuckets = ((kLutHigh - kLutLow) >> 16) + 1;

uint32_t FloatBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}
float BitsFloat(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// The maps and their decision points, 64-byte aligned for the gathers; midpoints[255] is
// +inf (never read by the search, which looks at indices <= 254, but keeps the table whole).
struct Tables {
  alignas(64) float map[2][256];        // [0]: unsigned, [1]: signed
  alignas(64) float midpoints[2][256];  // the same order
  uint8_t zero_code[2];                 // the code of 0.0: 0 unsigned, 127 signed
  // The SIMD encoding's look-up table (see LutCode): lut[s][sign * kLutBuckets + k], bucket k
  // holding the floats whose |bits|, clamped to [kLutLow, kLutHigh], have k + (kLutLow >> 16)
  // as their top 16 bits. Entry: base | flipped_point_low16 << 16.
  alignas(64) uint32_t lut[2][2 * kLutBuckets];
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    for (int s = 0; s < 2; ++s) {
      const bool is_signed = s == 1;
      for (int i = 0; i < 256; ++i) t.map[s][i] = DynamicMap(is_signed)[i];
      for (int i = 0; i < 255; ++i) t.midpoints[s][i] = DynamicMapMidpoints(is_signed)[i];
      t.midpoints[s][255] = std::numeric_limits<float>::infinity();
      t.zero_code[s] = static_cast<uint8_t>(
          std::lower_bound(t.midpoints[s], t.midpoints[s] + 255, 0.0f) - t.midpoints[s]);
      for (uint32_t sign = 0; sign < 2; ++sign) {
        for (uint32_t k = 0; k < kLutBuckets; ++k) {
          const uint32_t lo = kLutLow + (k << 16), hi = lo | 0xffffu;
          const uint32_t sign_bit = sign << 31;
          // The values of the bucket from the lowest: [lo, hi] or [-hi, -lo].
          const float lowest = BitsFloat((sign ? hi : lo) | sign_bit);
          const float highest = BitsFloat((sign ? lo : hi) | sign_bit);
          uint32_t base = 0, inside = 0, point_low = 0;
          for (int i = 0; i < 255; ++i) {
            const float p = t.midpoints[s][i];
            if (p < lowest) ++base;
            if (p >= lowest && p <= highest) {
              ++inside;
              point_low = FloatBits(p) & 0xffffu;
            }
          }
          if (inside > 1) {
            std::fprintf(stderr, "adam8bit: %u decision points in a look-up bucket\n", inside);
            std::abort();
          }
          // Compared as y_low' > point_low' with both flipped (x ^ 0xffff) for negative y:
          // y > p is |y| > |p| for y >= 0, |y| < |p| for y < 0. No point: never above.
          const uint32_t flipped = inside == 0 ? 0xffffu : (sign ? point_low ^ 0xffffu : point_low);
          t.lut[s][sign * kLutBuckets + k] = base | flipped << 16;
        }
      }
    }
    return t;
  }();
  return tables;
}

// #{i < 255 : y > midpoints[i]}.
inline uint8_t CodeOf(float y, const float* midpoints) {
  return static_cast<uint8_t>(std::lower_bound(midpoints, midpoints + 255, y) - midpoints);
}

// The code of y by the look-up table, as the SIMD paths compute it per lane: the same as
// CodeOf(y, midpoints[s]) for every float y (a NaN: 0).
inline uint8_t LutCode(float y, int s, const Tables& t) {
  const uint32_t bits = FloatBits(y);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0;
  const uint32_t sign = bits >> 31;
  const uint32_t a = std::min(std::max(bits & 0x7fffffffu, kLutLow), kLutHigh);
  const uint32_t e = t.lut[s][sign * kLutBuckets + ((a - kLutLow) >> 16)];
  const uint32_t y_low = (a & 0xffffu) ^ (sign ? 0xffffu : 0u);
  return static_cast<uint8_t>((e & 0xffu) + (y_low > (e >> 16) ? 1 : 0));
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
  // The bf16 copy of x (ToBf16 lane for lane: NaN quieted, else rounded to nearest even).
  static inline void StoreBf16(bf16* p, F x) {
    const I bits = _mm256_castps_si256(x);
    const I rounding =
        _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                         _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1)));
    const I rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
    // |bits| > 0x7f800000 as signed int32 (|bits| is non-negative).
    const I nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    const I quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const I out = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(out), _mm256_extracti128_si256(out, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), words);
  }
  // codes[0..7] = #{i : y > midpoints[i]} by the look-up table (LutCode, lane for lane).
  static inline void Encode(F y, const uint32_t* lut, uint8_t* codes) {
    const I bits = _mm256_castps_si256(y);
    const I a =
        _mm256_min_epi32(_mm256_max_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                          _mm256_set1_epi32(static_cast<int>(kLutLow))),
                         _mm256_set1_epi32(static_cast<int>(kLutHigh)));
    const I neg = _mm256_srai_epi32(bits, 31);
    const I index = _mm256_add_epi32(
        _mm256_srli_epi32(_mm256_sub_epi32(a, _mm256_set1_epi32(static_cast<int>(kLutLow))), 16),
        _mm256_and_si256(neg, _mm256_set1_epi32(static_cast<int>(kLutBuckets))));
    const I e = _mm256_i32gather_epi32(reinterpret_cast<const int*>(lut), index, 4);
    const I low16 = _mm256_set1_epi32(0xffff);
    const I y_low = _mm256_xor_si256(_mm256_and_si256(a, low16), _mm256_and_si256(neg, low16));
    const I above = _mm256_cmpgt_epi32(y_low, _mm256_srli_epi32(e, 16));
    // code = base - above (above is -1 or 0); a NaN lane: 0.
    I pos = _mm256_sub_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0xff)), above);
    pos = _mm256_and_si256(pos, _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_ORD_Q)));
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
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
namespace avx512 {
struct V {
  static constexpr size_t kLanes = 16;
  using F = __m512;
  using I = __m512i;
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
  // map[codes[0..15]] without a gather: the 256 entries as 8 pairs of registers, each pair
  // looked up by the code's low 5 bits (vpermi2ps), then the pair chosen by bits 5, 6 and 7.
  static inline F Decode(const uint8_t* codes, const float* map) {
    const I index = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    F r[8];
    for (int k = 0; k < 8; ++k) {
      r[k] = _mm512_permutex2var_ps(_mm512_load_ps(map + 32 * k), index,
                                    _mm512_load_ps(map + 32 * k + 16));
    }
    const __mmask16 b5 = _mm512_test_epi32_mask(index, _mm512_set1_epi32(32));
    const __mmask16 b6 = _mm512_test_epi32_mask(index, _mm512_set1_epi32(64));
    const __mmask16 b7 = _mm512_test_epi32_mask(index, _mm512_set1_epi32(128));
    for (int k = 0; k < 4; ++k) r[k] = _mm512_mask_blend_ps(b5, r[2 * k], r[2 * k + 1]);
    for (int k = 0; k < 2; ++k) r[k] = _mm512_mask_blend_ps(b6, r[2 * k], r[2 * k + 1]);
    return _mm512_mask_blend_ps(b7, r[0], r[1]);
  }
  // The bf16 copy of x (ToBf16 lane for lane: NaN quieted, else rounded to nearest even).
  static inline void StoreBf16(bf16* p, F x) {
    const I bits = _mm512_castps_si512(x);
    const I rounding =
        _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                         _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1)));
    I out = _mm512_srli_epi32(_mm512_add_epi32(bits, rounding), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    out = _mm512_mask_mov_epi32(
        out, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(out));
  }
  // As Avx2's: LutCode lane for lane.
  static inline void Encode(F y, const uint32_t* lut, uint8_t* codes) {
    const I bits = _mm512_castps_si512(y);
    const I a =
        _mm512_min_epu32(_mm512_max_epu32(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(static_cast<int>(kLutLow))),
                         _mm512_set1_epi32(static_cast<int>(kLutHigh)));
    const __mmask16 neg = _mm512_movepi32_mask(bits);
    const I bucket =
        _mm512_srli_epi32(_mm512_sub_epi32(a, _mm512_set1_epi32(static_cast<int>(kLutLow))), 16);
    const I index = _mm512_mask_add_epi32(bucket, neg, bucket,
                                          _mm512_set1_epi32(static_cast<int>(kLutBuckets)));
    const I e = _mm512_i32gather_epi32(index, lut, 4);
    const I low16 = _mm512_set1_epi32(0xffff);
    const I a_low = _mm512_and_si512(a, low16);
    const I y_low = _mm512_mask_xor_epi32(a_low, neg, a_low, low16);
    const __mmask16 above = _mm512_cmpgt_epu32_mask(y_low, _mm512_srli_epi32(e, 16));
    const I base = _mm512_and_si512(e, _mm512_set1_epi32(0xff));
    I pos = _mm512_mask_add_epi32(base, above, base, _mm512_set1_epi32(1));
    pos = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), pos);
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

uint8_t Adam8bitLutCodeForTesting(float y, bool is_signed) {
  return LutCode(y, is_signed ? 1 : 0, GetTables());
}

uint64_t Adam8bitBlocksRunForTesting(CpuAdamPath path) {
  return g_blocks_run[static_cast<int>(path)].load(std::memory_order_relaxed);
}

}  // namespace strata::cpu
