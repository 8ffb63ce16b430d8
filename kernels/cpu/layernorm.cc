// CPU layernorm: the reference follows llm.c's layernorm_forward/backward loop by loop (with
// fp32 sums for the parameter gradients, see layernorm.h); the fast version runs rows in
// parallel, vectorises the row reductions with 16 independent partial sums, and reduces the
// parameter gradients through per-thread fp32 partials instead of shared atomics.
// Thread-safety: see layernorm.h.
#include "kernels/cpu/layernorm.h"

#include <omp.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/elementwise.h"  // STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

// Independent partial sums per row reduction: enough for one AVX-512 vector, and the loop
// vectorises without the compiler having to reassociate one floating-point sum.
constexpr int kLanes = 16;

inline float SumLanes(const float* lanes) {
  float sum = 0.0f;
  for (int lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
  return sum;
}

// Normalises one row; returns mean and rstd through the pointers.
template <typename T>
STRATA_CPU_SIMD_CLONES void LayerNormForwardRow(T* out, float* mean_out, float* rstd_out,
                                                const T* x, const T* weight, const T* bias, int C) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) lanes[lane] += Load(x + i + lane);
  }
  float sum = SumLanes(lanes);
  for (; i < C; ++i) sum += Load(x + i);
  const float mean = sum / C;

  float square_lanes[kLanes] = {};
  i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const float shifted = Load(x + i + lane) - mean;
      square_lanes[lane] += shifted * shifted;
    }
  }
  float squares = SumLanes(square_lanes);
  for (; i < C; ++i) {
    const float shifted = Load(x + i) - mean;
    squares += shifted * shifted;
  }
  const float rstd = 1.0f / std::sqrt(squares / C + kLayerNormEps);

  for (i = 0; i < C; ++i) {
    Store(out + i, (Load(x + i) - mean) * rstd * Load(weight + i) + Load(bias + i));
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// dinp for one row, plus this row's contributions to the fp32 partial dweight/dbias.
template <typename T>
STRATA_CPU_SIMD_CLONES void LayerNormBackwardRow(T* dinp, float* dweight_partial,
                                                 float* dbias_partial, const T* dout, const T* x,
                                                 const T* weight, float mean, float rstd, int C) {
  float dnorm_lanes[kLanes] = {};
  float dnorm_norm_lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const float norm = (Load(x + i + lane) - mean) * rstd;
      const float dnorm = Load(weight + i + lane) * Load(dout + i + lane);
      dnorm_lanes[lane] += dnorm;
      dnorm_norm_lanes[lane] += dnorm * norm;
    }
  }
  float dnorm_sum = SumLanes(dnorm_lanes);
  float dnorm_norm_sum = SumLanes(dnorm_norm_lanes);
  for (; i < C; ++i) {
    const float norm = (Load(x + i) - mean) * rstd;
    const float dnorm = Load(weight + i) * Load(dout + i);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = dnorm_sum / C;
  const float dnorm_norm_mean = dnorm_norm_sum / C;

  for (i = 0; i < C; ++i) {
    const float norm = (Load(x + i) - mean) * rstd;
    const float d = Load(dout + i);
    const float dnorm = Load(weight + i) * d;
    dbias_partial[i] += d;
    dweight_partial[i] += norm * d;
    Store(dinp + i, Load(dinp + i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd);
  }
}

}  // namespace

template <typename T>
void LayerNormForwardReference(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                               const T* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    float sum = 0.0f;
    for (int i = 0; i < C; ++i) sum += Load(x + i);
    const float m = sum / C;
    float variance = 0.0f;  // biased, as PyTorch's LayerNorm
    for (int i = 0; i < C; ++i) {
      const float shifted = Load(x + i) - m;
      variance += shifted * shifted;
    }
    variance /= C;
    const float s = 1.0f / std::sqrt(variance + kLayerNormEps);
    T* out_row = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; ++i) {
      const float normalized = (Load(x + i) - m) * s;
      Store(out_row + i, normalized * Load(weight + i) + Load(bias + i));
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void LayerNormBackwardReference(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                                const T* weight, const float* mean, const float* rstd, int N,
                                int C) {
  // Parameter gradients are summed over rows in fp32 and stored once (see layernorm.h).
  std::vector<float> dweight_sum(C, 0.0f), dbias_sum(C, 0.0f);
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    const T* dout_row = dout + row;
    const T* x = inp + row;
    T* dinp_row = dinp + row;
    // Two reductions first: the means of dnorm and of dnorm * norm over the row.
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = 0; i < C; ++i) {
      const float norm = (Load(x + i) - mean[n]) * rstd[n];
      const float dnorm = Load(weight + i) * Load(dout_row + i);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int i = 0; i < C; ++i) {
      const float norm = (Load(x + i) - mean[n]) * rstd[n];
      const float dnorm = Load(weight + i) * Load(dout_row + i);
      dbias_sum[i] += Load(dout_row + i);
      dweight_sum[i] += norm * Load(dout_row + i);
      float dval = dnorm;              // through norm directly
      dval -= dnorm_mean;              // through the mean
      dval -= norm * dnorm_norm_mean;  // through the variance
      dval *= rstd[n];
      Store(dinp_row + i, Load(dinp_row + i) + dval);
    }
  }
  for (int i = 0; i < C; ++i) {
    Store(dweight + i, Load(dweight + i) + dweight_sum[i]);
    Store(dbias + i, Load(dbias + i) + dbias_sum[i]);
  }
}

template <typename T>
void LayerNormForward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                      const T* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (N > 1)
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    LayerNormForwardRow(out + row, mean + n, rstd + n, inp + row, weight, bias, C);
  }
}

template <typename T>
void LayerNormBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                       const float* mean, const float* rstd, int N, int C) {
  // partials[thread] = [dweight (C) | dbias (C)] of the rows that thread handled.
  const int max_threads = omp_get_max_threads();
  std::vector<float> partials(static_cast<size_t>(max_threads) * 2 * C);
#pragma omp parallel if (N > 1)
  {
    const int num_threads = omp_get_num_threads();
    float* dweight_partial = partials.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C;
    float* dbias_partial = dweight_partial + C;
    for (int i = 0; i < 2 * C; ++i) dweight_partial[i] = 0.0f;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const size_t row = static_cast<size_t>(n) * C;
      LayerNormBackwardRow(dinp + row, dweight_partial, dbias_partial, dout + row, inp + row,
                           weight, mean[n], rstd[n], C);
    }
    // Implicit barrier above: every partial is complete. Columns are split across threads
    // and each sums the partials in thread order, so the result is deterministic.
#pragma omp for schedule(static)
    for (int i = 0; i < C; ++i) {
      float dweight_sum = 0.0f, dbias_sum = 0.0f;
      for (int thread = 0; thread < num_threads; ++thread) {
        dweight_sum += partials[static_cast<size_t>(thread) * 2 * C + i];
        dbias_sum += partials[static_cast<size_t>(thread) * 2 * C + C + i];
      }
      Store(dweight + i, Load(dweight + i) + dweight_sum);
      Store(dbias + i, Load(dbias + i) + dbias_sum);
    }
  }
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template void LayerNormForwardReference<T>(T*, float*, float*, const T*, const T*, const T*,   \
                                             int, int);                                          \
  template void LayerNormForward<T>(T*, float*, float*, const T*, const T*, const T*, int, int); \
  template void LayerNormBackwardReference<T>(T*, T*, T*, const T*, const T*, const T*,          \
                                              const float*, const float*, int, int);             \
  template void LayerNormBackward<T>(T*, T*, T*, const T*, const T*, const T*, const float*,     \
                                     const float*, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
