// The bandwidth reference kernel (see cpu_adam_bandwidth.h). Per vector: four loads, one
// multiply by zero and three adds, three (four) stores: far below what a core can issue per
// cache line, so only memory limits it. Store types as the Adam kernel's at large sizes:
// normal stores for master, m and v, non-temporal ones for the bf16 copy (AVX-512).
// Thread-safety: reentrant.
#include "kernels/cpu/cpu_adam_bandwidth.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace strata::cpu {
namespace {

constexpr size_t kRangeAlignElements = 64;  // as cpu_adam.cc

enum class Isa { kAvx512, kAvx2, kScalar };

Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2")) return Isa::kAvx2;
  return Isa::kScalar;
}

// 16 elements; kMasked: only the lanes in `mask`. The param copy is returned, not stored.
template <bool kMasked>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m256i Traffic16(
    float* master, const float* grad, float* m, float* v, size_t i, __mmask16 mask, __m512 zero) {
  if constexpr (kMasked) {
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, grad + i), zero);
    const __m512 p = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, master + i), g);
    _mm512_mask_storeu_ps(m + i, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, m + i), g));
    _mm512_mask_storeu_ps(v + i, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, v + i), g));
    _mm512_mask_storeu_ps(master + i, mask, p);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(p), 16));
  } else {
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), zero);
    const __m512 p = _mm512_add_ps(_mm512_loadu_ps(master + i), g);
    _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), g));
    _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), g));
    _mm512_storeu_ps(master + i, p);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(p), 16));
  }
}

// Up to 16 elements [i, i + count) with masked loads and stores.
template <bool kParam>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void TrafficMasked(
    bf16* param, float* master, const float* grad, float* m, float* v, size_t i, size_t count,
    __m512 zero) {
  const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
  const __m256i upper = Traffic16<true>(master, grad, m, v, i, mask, zero);
  if constexpr (kParam) _mm256_mask_storeu_epi16(param + i, mask, upper);
}

// The bf16 copy, a write-only stream, goes out with non-temporal stores (measured 12% faster
// than normal stores, which first read every destination line); see cpu_adam.h.
template <bool kParam>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void SpanAvx512(bf16* param, float* master,
                                                                     const float* grad, float* m,
                                                                     float* v, size_t n,
                                                                     float zero) {
  const __m512 z = _mm512_set1_ps(zero);
  size_t i = 0;
  if constexpr (kParam) {
    const size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(param) % 64) % 64 / 2);
    for (; i < head; i += 16) {
      TrafficMasked<kParam>(param, master, grad, m, v, i, std::min<size_t>(16, head - i), z);
    }
    i = head;
  }
  for (; i + 32 <= n; i += 32) {
    const __m256i low = Traffic16<false>(master, grad, m, v, i, 0, z);
    const __m256i high = Traffic16<false>(master, grad, m, v, i + 16, 0, z);
    if constexpr (kParam) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(param + i),
                          _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1));
    }
  }
  for (; i < n; i += 16) {
    TrafficMasked<kParam>(param, master, grad, m, v, i, std::min<size_t>(16, n - i), z);
  }
  if constexpr (kParam) _mm_sfence();
}

template <bool kParam>
__attribute__((target("avx2"))) void SpanAvx2(bf16* param, float* master, const float* grad,
                                              float* m, float* v, size_t n, float zero) {
  const __m256 z = _mm256_set1_ps(zero);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), z);
    const __m256 p = _mm256_add_ps(_mm256_loadu_ps(master + i), g);
    _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_loadu_ps(m + i), g));
    _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(v + i), g));
    _mm256_storeu_ps(master + i, p);
    if constexpr (kParam) {
      const __m256i upper = _mm256_srli_epi32(_mm256_castps_si256(p), 16);
      const __m256i packed = _mm256_packus_epi32(upper, upper);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(param + i),
                       _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
    }
  }
  for (; i < n; ++i) {
    const float g = grad[i] * zero;
    master[i] += g;
    m[i] += g;
    v[i] += g;
    if constexpr (kParam) {
      uint32_t bits;
      __builtin_memcpy(&bits, &master[i], sizeof(bits));
      param[i].bits = static_cast<uint16_t>(bits >> 16);
    }
  }
}

template <bool kParam>
void SpanScalar(bf16* param, float* master, const float* grad, float* m, float* v, size_t n,
                float zero) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * zero;
    master[i] += g;
    m[i] += g;
    v[i] += g;
    if constexpr (kParam) {
      uint32_t bits;
      __builtin_memcpy(&bits, &master[i], sizeof(bits));
      param[i].bits = static_cast<uint16_t>(bits >> 16);
    }
  }
}

}  // namespace

const char* AdamTrafficReferenceIsaName() {
  switch (DetectIsa()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      return "scalar";
  }
  return "scalar";
}

void AdamTrafficReference(bf16* param, float* master, const float* grad, float* m, float* v,
                          size_t n, int threads) {
  if (n == 0) return;
  void (*span)(bf16*, float*, const float*, float*, float*, size_t, float);
  switch (DetectIsa()) {
    case Isa::kAvx512:
      span = param != nullptr ? SpanAvx512<true> : SpanAvx512<false>;
      break;
    case Isa::kAvx2:
      span = param != nullptr ? SpanAvx2<true> : SpanAvx2<false>;
      break;
    default:
      span = param != nullptr ? SpanScalar<true> : SpanScalar<false>;
      break;
  }
  volatile float zero_source = 0.0f;
  const float zero = zero_source;
  if (threads < 1) threads = omp_get_max_threads();
  const size_t blocks = (n + kRangeAlignElements - 1) / kRangeAlignElements;
  threads = static_cast<int>(std::max<size_t>(1, std::min<size_t>(threads, blocks)));
#pragma omp parallel num_threads(threads)
  for (int index = omp_get_thread_num(); index < threads; index += omp_get_num_threads()) {
    const size_t begin = std::min(n, blocks * index / threads * kRangeAlignElements);
    const size_t end = std::min(n, blocks * (index + 1) / threads * kRangeAlignElements);
    if (begin < end) {
      span(param == nullptr ? nullptr : param + begin, master + begin, grad + begin, m + begin,
           v + begin, end - begin, zero);
    }
  }
}

}  // namespace strata::cpu
