// Softmax + cross-entropy on CUDA (cuda_kernels.h; specification:
// kernels/cpu/cross_entropy.h). Rows have stride Vp; the softmax runs over their first V
// logits (the real vocabulary) and the padding [V, Vp) takes no part. One block per row, in
// three passes over the V logits: the maximum, the sum of exponentials (BlockMax/BlockSum,
// fixed order), then, unless dloss is 0, the gradient dloss * (softmax - one_hot) written over
// the logits in place, and the padding set to 0 (so a GEMM over the padded rows adds nothing
// for it). The row's loss is stored before any logit is overwritten.
// Thread-safety: launchers are reentrant.
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

template <typename S>
__global__ void SoftmaxCrossEntropyKernel(float* losses, S* logits, const int32_t* targets, int V,
                                          int Vp, float dloss) {
  __shared__ float scratch[kWarpSize];
  S* row = logits + static_cast<size_t>(blockIdx.x) * Vp;
  const int target = targets[blockIdx.x];
  float max_logit = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    max_logit = fmaxf(max_logit, DeviceLoad(row + i));
  max_logit = BlockMax(max_logit, scratch);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(DeviceLoad(row + i) - max_logit);
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + max_logit - DeviceLoad(row + target);
  if (dloss == 0.0f) return;  // uniform over the block
  __syncthreads();            // the target's logit is read above before any thread overwrites it
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float probability = expf(DeviceLoad(row + i) - max_logit) / sum;
    const float indicator = i == target ? 1.0f : 0.0f;
    DeviceStore(row + i, dloss * (probability - indicator));
  }
  for (int i = V + threadIdx.x; i < Vp; i += blockDim.x) DeviceStore(row + i, 0.0f);
}

}  // namespace

Status SoftmaxCrossEntropy(DType dtype, float* losses, void* logits, const int32_t* targets, int N,
                           int V, int Vp, float dloss, cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&SoftmaxCrossEntropyKernel<S>>(
        N, kThreads, 0, stream, losses, static_cast<S*>(logits), targets, V, Vp, dloss);
    return 0;
  });
  return LaunchStatus("SoftmaxCrossEntropyKernel", static_cast<size_t>(N) * Vp);
}

}  // namespace strata::cuda_kernels
