// CPU fused softmax + cross-entropy. Three passes per row: the maximum, the sum of
// e^(x - max) (giving log-sum-exp), then, when a gradient is asked for, the overwrite with
// dloss * (e^(x - lse) - onehot). The fast version keeps 16 independent partial maxima and
// sums so the passes vectorise, and uses ExpApprox.
// Thread-safety: see cross_entropy.h.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/cpu/elementwise.h"  // ExpApprox, STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

constexpr int kLanes = 16;

template <typename T>
STRATA_CPU_SIMD_CLONES float SoftmaxCrossEntropyRow(T* logits, int target, int V, int Vp, float dloss) {
  float max_lanes[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) max_lanes[lane] = -INFINITY;
  int i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const float x = Load(logits + i + lane);
      max_lanes[lane] = x > max_lanes[lane] ? x : max_lanes[lane];
    }
  }
  float max_logit = -INFINITY;
  for (int lane = 0; lane < kLanes; ++lane) {
    max_logit = max_lanes[lane] > max_logit ? max_lanes[lane] : max_logit;
  }
  for (; i < V; ++i) max_logit = Load(logits + i) > max_logit ? Load(logits + i) : max_logit;

  float sum_lanes[kLanes] = {};
  i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      sum_lanes[lane] += ExpApprox(Load(logits + i + lane) - max_logit);
    }
  }
  float sum = 0.0f;
  for (int lane = 0; lane < kLanes; ++lane) sum += sum_lanes[lane];
  for (; i < V; ++i) sum += ExpApprox(Load(logits + i) - max_logit);

  const float log_sum_exp = max_logit + std::log(sum);
  const float loss = log_sum_exp - Load(logits + target);
  if (dloss != 0.0f) {
    for (i = 0; i < V; ++i) Store(logits + i, dloss * ExpApprox(Load(logits + i) - log_sum_exp));
    // The loop above overwrote the target's logit; its probability is e^(-loss).
    Store(logits + target, dloss * (ExpApprox(-loss) - 1.0f));
    for (i = V; i < Vp; ++i) Store(logits + i, 0.0f);  // padding: no gradient
  }
  return loss;
}

}  // namespace

template <typename T>
void SoftmaxCrossEntropyReference(float* losses, T* logits, const int32_t* targets, int N, int V,
                                  int Vp, float dloss) {
  for (int n = 0; n < N; ++n) {
    T* row = logits + static_cast<size_t>(n) * Vp;
    const int target = targets[n];
    // The maximum is subtracted only for numerical stability (exp cannot overflow).
    float max_logit = -INFINITY;
    for (int i = 0; i < V; ++i) max_logit = std::max(max_logit, Load(row + i));
    float sum = 0.0f;
    for (int i = 0; i < V; ++i) sum += std::exp(Load(row + i) - max_logit);
    // loss = -log(e^(x_target - max) / sum) = log(sum) + max - x_target
    losses[n] = std::log(sum) + max_logit - Load(row + target);
    if (dloss != 0.0f) {
      for (int i = 0; i < V; ++i) {
        const float probability = std::exp(Load(row + i) - max_logit) / sum;
        const float indicator = i == target ? 1.0f : 0.0f;
        Store(row + i, dloss * (probability - indicator));
      }
      for (int i = V; i < Vp; ++i) Store(row + i, 0.0f);
    }
  }
}

template <typename T>
void SoftmaxCrossEntropy(float* losses, T* logits, const int32_t* targets, int N, int V, int Vp,
                         float dloss) {
#pragma omp parallel for schedule(static) if (N > 1)
  for (int n = 0; n < N; ++n) {
    losses[n] =
        SoftmaxCrossEntropyRow(logits + static_cast<size_t>(n) * Vp, targets[n], V, Vp, dloss);
  }
}

#define STRATA_INSTANTIATE(T)                                                                 \
  template void SoftmaxCrossEntropyReference<T>(float*, T*, const int32_t*, int, int, int,   \
                                                float);                                     \
  template void SoftmaxCrossEntropy<T>(float*, T*, const int32_t*, int, int, int, float);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
