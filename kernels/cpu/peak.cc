// fp32 FMA peak measurement (see peak.h). Each kernel runs `iterations` rounds of one FMA on
// every accumulator, acc = acc * multiplier + addend, with multiplier, addend and distinct
// starting values passed at run time so nothing can be constant-folded or merged; acc
// converges to addend / (1 - multiplier) = 1, so values stay normal (no denormal slowdowns,
// no overflow). The accumulators are summed and
// returned, and the caller stores the sum in a volatile, so the chains cannot be removed.
// The SIMD kernels are compiled for their instruction set with target attributes and only
// called after __builtin_cpu_supports confirms the CPU (and OS) has it.
// Thread-safety: reentrant; the only shared state is a write-only volatile sink.
#include "kernels/cpu/peak.h"

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>

namespace strata::cpu {
namespace {

volatile float g_checksum_sink = 0.0f;

enum class FmaIsa { kAvx512, kAvx2, kScalar };

FmaIsa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return FmaIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return FmaIsa::kAvx2;
  return FmaIsa::kScalar;
}

// 16 chains x 16 lanes: 256 FMAs (512 flops) per iteration; 16 of the 32 zmm registers.
__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t iterations, float multiplier,
                                                       float addend, const float* start) {
  const __m512 m = _mm512_set1_ps(multiplier);
  const __m512 a = _mm512_set1_ps(addend);
  __m512 a0 = _mm512_set1_ps(start[0]), a1 = _mm512_set1_ps(start[1]),
         a2 = _mm512_set1_ps(start[2]), a3 = _mm512_set1_ps(start[3]),
         a4 = _mm512_set1_ps(start[4]), a5 = _mm512_set1_ps(start[5]),
         a6 = _mm512_set1_ps(start[6]), a7 = _mm512_set1_ps(start[7]),
         a8 = _mm512_set1_ps(start[8]), a9 = _mm512_set1_ps(start[9]),
         a10 = _mm512_set1_ps(start[10]), a11 = _mm512_set1_ps(start[11]),
         a12 = _mm512_set1_ps(start[12]), a13 = _mm512_set1_ps(start[13]),
         a14 = _mm512_set1_ps(start[14]), a15 = _mm512_set1_ps(start[15]);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = _mm512_fmadd_ps(a0, m, a);
    a1 = _mm512_fmadd_ps(a1, m, a);
    a2 = _mm512_fmadd_ps(a2, m, a);
    a3 = _mm512_fmadd_ps(a3, m, a);
    a4 = _mm512_fmadd_ps(a4, m, a);
    a5 = _mm512_fmadd_ps(a5, m, a);
    a6 = _mm512_fmadd_ps(a6, m, a);
    a7 = _mm512_fmadd_ps(a7, m, a);
    a8 = _mm512_fmadd_ps(a8, m, a);
    a9 = _mm512_fmadd_ps(a9, m, a);
    a10 = _mm512_fmadd_ps(a10, m, a);
    a11 = _mm512_fmadd_ps(a11, m, a);
    a12 = _mm512_fmadd_ps(a12, m, a);
    a13 = _mm512_fmadd_ps(a13, m, a);
    a14 = _mm512_fmadd_ps(a14, m, a);
    a15 = _mm512_fmadd_ps(a15, m, a);
  }
  const __m512 sum =
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                  _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
                    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                  _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
  // Lane sum through memory: gcc 12's _mm512_reduce_add_ps trips -Wuninitialized.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}
constexpr int64_t kFlopsPerIterationAvx512 = 16 * 16 * 2;

// 12 chains x 8 lanes: 96 FMAs (192 flops) per iteration; 12 accumulators plus the two
// operands fit the 16 ymm registers without spilling.
__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iterations, float multiplier,
                                                      float addend, const float* start) {
  const __m256 m = _mm256_set1_ps(multiplier);
  const __m256 a = _mm256_set1_ps(addend);
  __m256 a0 = _mm256_set1_ps(start[0]), a1 = _mm256_set1_ps(start[1]),
         a2 = _mm256_set1_ps(start[2]), a3 = _mm256_set1_ps(start[3]),
         a4 = _mm256_set1_ps(start[4]), a5 = _mm256_set1_ps(start[5]),
         a6 = _mm256_set1_ps(start[6]), a7 = _mm256_set1_ps(start[7]),
         a8 = _mm256_set1_ps(start[8]), a9 = _mm256_set1_ps(start[9]),
         a10 = _mm256_set1_ps(start[10]), a11 = _mm256_set1_ps(start[11]);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = _mm256_fmadd_ps(a0, m, a);
    a1 = _mm256_fmadd_ps(a1, m, a);
    a2 = _mm256_fmadd_ps(a2, m, a);
    a3 = _mm256_fmadd_ps(a3, m, a);
    a4 = _mm256_fmadd_ps(a4, m, a);
    a5 = _mm256_fmadd_ps(a5, m, a);
    a6 = _mm256_fmadd_ps(a6, m, a);
    a7 = _mm256_fmadd_ps(a7, m, a);
    a8 = _mm256_fmadd_ps(a8, m, a);
    a9 = _mm256_fmadd_ps(a9, m, a);
    a10 = _mm256_fmadd_ps(a10, m, a);
    a11 = _mm256_fmadd_ps(a11, m, a);
  }
  const __m256 sum =
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                  _mm256_add_ps(a4, a5)),
                    _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a6, a7), _mm256_add_ps(a8, a9)),
                                  _mm256_add_ps(a10, a11)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}
constexpr int64_t kFlopsPerIterationAvx2 = 12 * 8 * 2;

// Fallback without hardware FMA: a multiply and an add per chain (the same 2 flops).
float FmaLoopScalar(int64_t iterations, float multiplier, float addend, const float* start) {
  float acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = start[i];
  for (int64_t i = 0; i < iterations; ++i) {
    for (float& value : acc) value = value * multiplier + addend;
  }
  float total = 0.0f;
  for (float value : acc) total += value;
  return total;
}
constexpr int64_t kFlopsPerIterationScalar = 16 * 2;

}  // namespace

const char* Fp32FmaPeakIsaName() {
  switch (DetectIsa()) {
    case FmaIsa::kAvx512:
      return "avx512f";
    case FmaIsa::kAvx2:
      return "avx2+fma";
    case FmaIsa::kScalar:
      return "scalar";
  }
  return "scalar";
}

double MeasureFp32FmaPeakGflops(int threads, double seconds) {
  const FmaIsa isa = DetectIsa();
  float (*loop)(int64_t, float, float, const float*) = FmaLoopScalar;
  int64_t flops_per_iteration = kFlopsPerIterationScalar;
  // Iterations per timed chunk: about 0.1-0.5 ms at peak, so the clock is read rarely and
  // the overrun past `seconds` is small.
  int64_t chunk_iterations = 1 << 15;
  if (isa == FmaIsa::kAvx512) {
    loop = FmaLoopAvx512;
    flops_per_iteration = kFlopsPerIterationAvx512;
    chunk_iterations = 1 << 16;
  } else if (isa == FmaIsa::kAvx2) {
    loop = FmaLoopAvx2;
    flops_per_iteration = kFlopsPerIterationAvx2;
    chunk_iterations = 1 << 16;
  }
  if (threads < 1) threads = omp_get_max_threads();
  // Multiplier, addend and starting values come from volatiles so the compiler sees run-time
  // values. The starting values must differ: chains that start equal stay equal, and the
  // compiler then merges them into one (measured: one chain counted as 16, a bogus ~2x
  // "peak" that is really a latency-bound loop).
  volatile float multiplier_source = 0.999f;
  const float multiplier = multiplier_source;
  const float addend = 1.0f - multiplier;
  float starting_values[16];
  for (int i = 0; i < 16; ++i) {
    volatile float value = 0.5f + 0.03125f * i;
    starting_values[i] = value;
  }

  double total_gflops = 0.0;
  float checksum = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total_gflops, checksum)
  {
    // Warm-up chunk (clocks, page-in), then start together.
    checksum += loop(chunk_iterations, multiplier, addend, starting_values);
#pragma omp barrier
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    int64_t chunks = 0;
    double elapsed_seconds = 0.0;
    do {
      checksum += loop(chunk_iterations, multiplier, addend, starting_values);
      ++chunks;
      elapsed_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed_seconds < seconds);
    const double flops = static_cast<double>(chunks) * chunk_iterations * flops_per_iteration;
    // Each thread's rate over its own wall time; threads that share a core see their time
    // slices as lower rates, so the sum stays the machine's throughput.
    if (elapsed_seconds > 0.0) total_gflops += flops / elapsed_seconds * 1e-9;
  }
  g_checksum_sink = checksum;
  return total_gflops;
}

}  // namespace strata::cpu
