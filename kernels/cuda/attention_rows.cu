// The row kernels of the GEMM attention (kernels/attention_gemm.h, cuda_kernels.h): one
// block per score row (x, i) of T elements, 128 threads striding over the row. Each row's
// max and sum are block reductions in a fixed order (deterministic); elements j > i are
// written as 0, so the GEMMs after them see a causal mask.
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"
#include "device/cuda/cuda_status.h"

namespace strata::cuda_kernels {
namespace {

constexpr int kRowThreads = 128;

// grid (T, heads).
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    SoftmaxRowsKernel(S* p, float* stats, int64_t stats_stride, const float* scores, int T) {
  __shared__ float scratch[kWarpSize];
  const int i = blockIdx.x, x = blockIdx.y;
  const size_t row = (static_cast<size_t>(x) * T + i) * T;
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) local_max = fmaxf(local_max, scores[row + j]);
  const float max = BlockMax(local_max, scratch);
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) local_sum += expf(scores[row + j] - max);
  const float lse = max + logf(BlockSum(local_sum, scratch));
  if (threadIdx.x == 0) stats[x * stats_stride + i] = lse;
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    DeviceStore(p + row + j, j <= i ? expf(scores[row + j] - lse) : 0.0f);
  }
}

// grid (T, heads).
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    SoftmaxBackwardRowsKernel(S* p, S* ds, const float* scores, const float* dp,
                              const float* stats, int64_t stats_stride, const S* dout,
                              const S* out, int64_t row_stride, int64_t head_stride, int hs,
                              int T) {
  __shared__ float scratch[kWarpSize];
  const int i = blockIdx.x, x = blockIdx.y;
  const size_t offset = x * head_stride + i * row_stride;
  float local = 0.0f;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    local += DeviceLoad(dout + offset + d) * DeviceLoad(out + offset + d);
  }
  const float dot = BlockSum(local, scratch);  // D_i
  const float lse = stats[x * stats_stride + i];
  const size_t row = (static_cast<size_t>(x) * T + i) * T;
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    const float prob = j <= i ? expf(scores[row + j] - lse) : 0.0f;
    DeviceStore(p + row + j, prob);
    DeviceStore(ds + row + j, j <= i ? prob * (dp[row + j] - dot) : 0.0f);
  }
}

template <typename S>
__global__ void AddFloatRowsKernel(S* dst, int64_t row_stride, int64_t head_stride,
                                   const float* src, int T, int hs, size_t n) {
  STRATA_GRID_STRIDE_LOOP(e, n) {
    const size_t d = e % hs, i = (e / hs) % T, x = e / (static_cast<size_t>(hs) * T);
    S* at = dst + x * head_stride + i * row_stride + d;
    DeviceStore(at, DeviceLoad(at) + src[e]);
  }
}

}  // namespace

Status AttentionSoftmaxRows(DType dtype, void* p, float* stats, int64_t stats_stride,
                            const float* scores, int heads, int T, cudaStream_t stream) {
  if (heads == 0 || T == 0) return absl::OkStatus();
  return DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&SoftmaxRowsKernel<S>>(
        dim3(T, heads), kRowThreads, 0, stream, static_cast<S*>(p), stats, stats_stride, scores, T);
    return LaunchStatus("SoftmaxRowsKernel", static_cast<size_t>(heads) * T);
  });
}

Status AttentionSoftmaxBackwardRows(DType dtype, void* p, void* ds, const float* scores,
                                    const float* dp, const float* stats, int64_t stats_stride,
                                    const void* dout, const void* out, int64_t row_stride,
                                    int64_t head_stride, int hs, int heads, int T,
                                    cudaStream_t stream) {
  if (heads == 0 || T == 0) return absl::OkStatus();
  return DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&SoftmaxBackwardRowsKernel<S>>(
        dim3(T, heads), kRowThreads, 0, stream, static_cast<S*>(p), static_cast<S*>(ds), scores, dp,
        stats, stats_stride, static_cast<const S*>(dout), static_cast<const S*>(out), row_stride,
        head_stride, hs, T);
    return LaunchStatus("SoftmaxBackwardRowsKernel", static_cast<size_t>(heads) * T);
  });
}

Status AttentionAddFloatRows(DType dtype, void* dst, int64_t row_stride, int64_t head_stride,
                             const float* src, int heads, int T, int hs, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(heads) * T * hs;
  if (n == 0) return absl::OkStatus();
  return DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AddFloatRowsKernel<S>>(GridStrideBlocks(n, 256), 256, 0, stream,
                                                   static_cast<S*>(dst), row_stride, head_stride,
                                                   src, T, hs, n);
    return LaunchStatus("AddFloatRowsKernel", n);
  });
}

}  // namespace strata::cuda_kernels
