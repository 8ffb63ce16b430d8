// CPU RMSNorm: the reference writes rmsnorm.h's formulas out row by row; the fast version
// runs rows in parallel with 16 independent partial sums per row reduction (so the loop
// vectorises) and reduces dweight through per-thread fp32 partials.
// Thread-safety: see rmsnorm.h.
#include "kernels/cpu/rmsnorm.h"

#include <omp.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/elementwise.h"  // STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

constexpr int kLanes = 16;

inline float SumLanes(const float* lanes) {
  float sum = 0.0f;
  for (int lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
  return sum;
}

template <typename T>
STRATA_CPU_SIMD_CLONES void RmsNormForwardRow(T* out, float* rstd_out, const T* x, const T* weight,
                                              int C, float eps) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const float v = Load(x + i + lane);
      lanes[lane] += v * v;
    }
  }
  float squares = SumLanes(lanes);
  for (; i < C; ++i) squares += Load(x + i) * Load(x + i);
  const float rstd = 1.0f / std::sqrt(squares / C + eps);
  for (i = 0; i < C; ++i) Store(out + i, Load(x + i) * rstd * Load(weight + i));
  *rstd_out = rstd;
}

template <typename T>
STRATA_CPU_SIMD_CLONES void RmsNormBackwardRow(T* dinp, float* dweight_partial, const T* dout,
                                               const T* x, const T* weight, float rstd, int C) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      lanes[lane] += Load(weight + i + lane) * Load(dout + i + lane) * Load(x + i + lane) * rstd;
    }
  }
  float dot = SumLanes(lanes);
  for (; i < C; ++i) dot += Load(weight + i) * Load(dout + i) * Load(x + i) * rstd;
  const float mean_gn = dot / C;
  for (i = 0; i < C; ++i) {
    const float n = Load(x + i) * rstd;
    const float d = Load(dout + i);
    dweight_partial[i] += d * n;
    Store(dinp + i, Load(dinp + i) + rstd * (Load(weight + i) * d - n * mean_gn));
  }
}

}  // namespace

template <typename T>
void RmsNormForwardReference(T* out, float* rstd, const T* inp, const T* weight, int N, int C,
                             float eps) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    float squares = 0.0f;
    for (int i = 0; i < C; ++i) squares += Load(x + i) * Load(x + i);
    const float s = 1.0f / std::sqrt(squares / C + eps);
    T* out_row = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; ++i) Store(out_row + i, Load(x + i) * s * Load(weight + i));
    rstd[n] = s;
  }
}

template <typename T>
void RmsNormBackwardReference(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                              const float* rstd, int N, int C) {
  std::vector<float> dweight_sum(C, 0.0f);
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    const T* x = inp + row;
    const T* d = dout + row;
    // mean over the row of g * n, g = weight * dout, n = x * rstd (the normalised input).
    float mean_gn = 0.0f;
    for (int i = 0; i < C; ++i) mean_gn += Load(weight + i) * Load(d + i) * Load(x + i) * rstd[n];
    mean_gn /= C;
    for (int i = 0; i < C; ++i) {
      const float normalized = Load(x + i) * rstd[n];
      dweight_sum[i] += Load(d + i) * normalized;
      const float g = Load(weight + i) * Load(d + i);
      Store(dinp + row + i, Load(dinp + row + i) + rstd[n] * (g - normalized * mean_gn));
    }
  }
  for (int i = 0; i < C; ++i) Store(dweight + i, Load(dweight + i) + dweight_sum[i]);
}

template <typename T>
void RmsNormForward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (N > 1)
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    RmsNormForwardRow(out + row, rstd + n, inp + row, weight, C, eps);
  }
}

template <typename T>
void RmsNormBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                     const float* rstd, int N, int C) {
  const int max_threads = omp_get_max_threads();
  std::vector<float> partials(static_cast<size_t>(max_threads) * C);
#pragma omp parallel if (N > 1)
  {
    const int num_threads = omp_get_num_threads();
    float* partial = partials.data() + static_cast<size_t>(omp_get_thread_num()) * C;
    for (int i = 0; i < C; ++i) partial[i] = 0.0f;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const size_t row = static_cast<size_t>(n) * C;
      RmsNormBackwardRow(dinp + row, partial, dout + row, inp + row, weight, rstd[n], C);
    }
    // Implicit barrier above; columns split across threads, partials summed in thread order.
#pragma omp for schedule(static)
    for (int i = 0; i < C; ++i) {
      float sum = 0.0f;
      for (int thread = 0; thread < num_threads; ++thread) {
        sum += partials[static_cast<size_t>(thread) * C + i];
      }
      Store(dweight + i, Load(dweight + i) + sum);
    }
  }
}

#define STRATA_INSTANTIATE(T)                                                                   \
  template void RmsNormForwardReference<T>(T*, float*, const T*, const T*, int, int, float);   \
  template void RmsNormForward<T>(T*, float*, const T*, const T*, int, int, float);            \
  template void RmsNormBackwardReference<T>(T*, T*, const T*, const T*, const T*, const float*, \
                                            int, int);                                          \
  template void RmsNormBackward<T>(T*, T*, const T*, const T*, const T*, const float*, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
