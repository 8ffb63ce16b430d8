// RMSNorm on CUDA (cuda_kernels.h; specification: kernels/cpu/rmsnorm.h), in fp32 with one
// rounding per stored element. Forward and the input gradient: one block per row (LLaMA's
// rows are thousands of channels wide), the row's sum reduced by BlockSum (a fixed order).
// The weight gradient: the fixed-order column sums of column_sums.cuh with a null mean
// (norm = inp * rstd). rstd is fp32 [N], as the reference stores it.
// Thread-safety: launchers are reentrant.
#include <cmath>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// grid N: block n normalises row n.
template <typename S>
__global__ void RmsNormForwardKernel(S* out, float* rstd_out, const S* inp, const S* weight, int C,
                                     float eps) {
  __shared__ float scratch[kWarpSize];
  const size_t offset = static_cast<size_t>(blockIdx.x) * C;
  const S* x = inp + offset;
  float squares = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float value = DeviceLoad(x + i);
    squares += value * value;
  }
  const float rstd = 1.0f / sqrtf(BlockSum(squares, scratch) / C + eps);
  S* out_row = out + offset;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    DeviceStore(out_row + i, DeviceLoad(x + i) * rstd * DeviceLoad(weight + i));
  }
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
}

// grid N: dinp of row n += rstd * (g - norm * mean(g * norm)), g = weight * dout,
// norm = inp * rstd.
template <typename S>
__global__ void RmsNormBackwardInputKernel(S* dinp, const S* dout, const S* inp, const S* weight,
                                           const float* rstd, int C) {
  __shared__ float scratch[kWarpSize];
  const size_t offset = static_cast<size_t>(blockIdx.x) * C;
  const S* x = inp + offset;
  const S* d = dout + offset;
  const float s = rstd[blockIdx.x];
  float g_norm_sum = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    g_norm_sum += DeviceLoad(weight + i) * DeviceLoad(d + i) * DeviceLoad(x + i) * s;
  }
  const float g_norm_mean = BlockSum(g_norm_sum, scratch) / C;
  S* dinp_row = dinp + offset;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float norm = DeviceLoad(x + i) * s;
    const float g = DeviceLoad(weight + i) * DeviceLoad(d + i);
    DeviceStore(dinp_row + i, DeviceLoad(dinp_row + i) + s * (g - norm * g_norm_mean));
  }
}

}  // namespace

Status RmsNormForward(DType dtype, void* out, float* rstd, const void* inp, const void* weight,
                      int N, int C, float eps, cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&RmsNormForwardKernel<S>>(N, kThreads, 0, stream, static_cast<S*>(out),
                                                     rstd, static_cast<const S*>(inp),
                                                     static_cast<const S*>(weight), C, eps);
    return 0;
  });
  return LaunchStatus("RmsNormForwardKernel", static_cast<size_t>(N) * C);
}

Status RmsNormBackward(DType dtype, void* dinp, void* dweight, const void* dout, const void* inp,
                       const void* weight, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return absl::OkStatus();
  return DispatchStorage(dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    ::strata::cuda::Launch<&RmsNormBackwardInputKernel<S>>(
        N, kThreads, 0, stream, static_cast<S*>(dinp), static_cast<const S*>(dout),
        static_cast<const S*>(inp), static_cast<const S*>(weight), rstd, C);
    RETURN_IF_ERROR(LaunchStatus("RmsNormBackwardInputKernel", static_cast<size_t>(N) * C));
    return ColumnSums(static_cast<S*>(nullptr), static_cast<S*>(dweight),
                      static_cast<const S*>(dout), static_cast<const S*>(inp),
                      static_cast<const float*>(nullptr), rstd, N, C, stream);
  });
}

}  // namespace strata::cuda_kernels
