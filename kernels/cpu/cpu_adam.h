// The fast CPU AdamW of ZeRO-Offload: one pass over fp32 master weights, fp32 gradients and
// the fp32 moments m, v that also writes the updated weights in the compute dtype (fp32 or
// bf16, rounded to nearest even), so the step never makes a second pass over memory.
//
// Paths: "avx512" (needs AVX-512 F+BW+VL+DQ; the bf16 copy through vcvtne2ps2bf16 where the
// CPU has AVX512_BF16, then named "avx512+bf16"), "avx2" (needs AVX2) and the scalar
// "reference". The path is chosen at run time from the CPU's features, never from the build
// machine; it can be forced by CpuAdamOptions::path or, when that is kAuto, by the
// environment variable STRATA_CPU_ADAM=reference|avx2|avx512|auto.
//
// Invariant: every path computes exactly the formula and operation order of
// AdamWReference in kernels/cpu/adamw.h, with no FMA contraction, IEEE division and square
// root (or a proven-exact replacement) and exact bf16 rounding including denormals and NaN,
// so every path agrees BIT FOR BIT with CpuAdamReference below, whatever the path, thread
// count, size or alignment (tested; only NaN payloads may differ).
//   g = grad * grad_scale; m = beta1 * m + (1 - beta1) * g; v = beta2 * v + ((1 - beta2) * g) * g
//   master -= lr * ((m / c1) / (sqrt(v / c2) + eps) + weight_decay * master)
//   with c1 = 1 - beta1^step, c2 = 1 - beta2^step computed in double, rounded to fp32
//   (the shared per-step constants of kernels/adam_math.h).
// Throughput: memory-bound on the target machine (28 bytes/param with fp32 params, 30 with
// the bf16 copy); `strata bench adam` (bench/bench_adam.h) measures it against a
// bandwidth reference kernel.
//
// Thread-safety: CpuAdam is an immutable value after Create; Step may be called from any
// thread, concurrently on disjoint arrays. Each Step runs an OpenMP parallel region (a team
// of the calling thread) with each thread owning one contiguous, cache-line-aligned range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"  // AdamParams

namespace strata::cpu {

enum class CpuAdamPath { kAuto, kReference, kAvx2, kAvx512 };

// "auto", "reference", "avx2", "avx512".
const char* CpuAdamPathName(CpuAdamPath path);
// Inverse of CpuAdamPathName; an unknown name is an InvalidArgument error listing the names.
StatusOr<CpuAdamPath> ParseCpuAdamPath(const std::string& name);
// Whether this CPU and OS can run `path` (kAuto and kReference: always).
bool CpuAdamPathSupported(CpuAdamPath path);
// The fastest path this CPU supports (never kAuto).
CpuAdamPath BestCpuAdamPath();
// `requested` unless it is kAuto; then STRATA_CPU_ADAM when set and not "auto"; else
// BestCpuAdamPath(). A path the CPU lacks is a FailedPrecondition error, an unknown
// environment value an InvalidArgument error.
StatusOr<CpuAdamPath> ResolveCpuAdamPath(CpuAdamPath requested);

struct CpuAdamOptions {
  // kAuto: STRATA_CPU_ADAM if set, else the best path of this CPU.
  CpuAdamPath path = CpuAdamPath::kAuto;
  // OpenMP threads per Step; < 1: omp_get_max_threads() at each call. Small arrays use fewer
  // threads (at least kCpuAdamMinElementsPerThread elements each).
  int threads = 0;
  // AVX-512 path, bf16 output: use vcvtne2ps2bf16 where the CPU has AVX512_BF16. That
  // instruction flushes denormal inputs to zero, so lanes holding a denormal are redone with
  // the exact integer rounding; false uses the integer rounding for every lane.
  bool use_bf16_instruction = true;
  // AVX-512 path: a param copy (fp32 or bf16) of at least this many elements is written with
  // non-temporal stores, which skip reading the destination's cache lines before writing them
  // (measured +12% throughput on the bf16 pattern at 50M params); smaller copies use normal
  // stores and stay in cache for whoever reads them next. Master, m and v, which the step
  // reads anyway, always use normal stores (non-temporal ones measured 25% slower).
  size_t stream_param_min_elements = size_t{1} << 20;
};

// Below this many elements per thread, a Step uses fewer threads.
inline constexpr size_t kCpuAdamMinElementsPerThread = 16384;

class CpuAdam {
 public:
  // Resolves the path (see ResolveCpuAdamPath).
  static StatusOr<CpuAdam> Create(const CpuAdamOptions& options = {});

  CpuAdamPath path() const { return path_; }
  // "reference", "avx2" or "avx512" (with "+bf16" when vcvtne2ps2bf16 is used).
  const char* path_name() const;
  int threads() const { return threads_; }

  // One AdamW step of n elements. `param` (the compute-dtype copy) may be null (skipped);
  // the fp32 overload also accepts param == master (nothing extra is written). Otherwise no
  // two arrays may overlap. hp.step must be >= 1. No alignment is required; 64-byte aligned
  // arrays are fastest.
  Status Step(float* param, float* master, const float* grad, float* m, float* v, size_t n,
              const AdamParams& hp) const;
  Status Step(bf16* param, float* master, const float* grad, float* m, float* v, size_t n,
              const AdamParams& hp) const;
  // The same for a type-erased compute-dtype pointer (kernels/ops.h style).
  Status Step(DType dtype, void* param, float* master, const float* grad, float* m, float* v,
              size_t n, const AdamParams& hp) const;

 private:
  CpuAdam(CpuAdamPath path, int threads, bool bf16_instruction, size_t stream_param_min_elements)
      : path_(path),
        threads_(threads),
        bf16_instruction_(bf16_instruction),
        stream_param_min_elements_(stream_param_min_elements) {}
  template <typename T>
  Status StepImpl(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                  const AdamParams& hp) const;

  CpuAdamPath path_;
  int threads_;
  bool bf16_instruction_;  // AVX-512 path only, and only where the CPU has AVX512_BF16
  size_t stream_param_min_elements_;
};

// The specification: a single-threaded scalar loop, the same formula and operation order as
// AdamWReference (kernels/cpu/adamw.h). `param` may be null.
template <typename T>
void CpuAdamReference(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                      const AdamParams& hp);

// Test support: how many kernel spans each path has run in this process (one per thread per
// Step), and how many spans used vcvtne2ps2bf16. Lets tests prove a forced path really ran.
uint64_t CpuAdamSpansRunForTesting(CpuAdamPath path);
uint64_t CpuAdamBf16InstructionSpansForTesting();

}  // namespace strata::cpu
