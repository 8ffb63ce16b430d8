// LayerNorm on CUDA (cuda_kernels.h; specification: kernels/cpu/layernorm.h), in fp32 with
// one rounding per stored element. Forward and the input gradient: one warp per row, the
// row's sums reduced by WarpSum (a fixed butterfly order). Weight and bias gradients: the
// fixed-order column sums of column_sums.cuh. mean and rstd are fp32 [N], as the reference
// stores them; eps is cpu::kLayerNormEps.
// Thread-safety: launchers are reentrant.
#include <cmath>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

constexpr float kLayerNormEps = 1e-5f;  // as cpu::kLayerNormEps

template <typename S>
__global__ void LayerNormForwardKernel(S* out, float* mean_out, float* rstd_out, const S* inp,
                                       const S* weight, const S* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warp
  const S* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) sum += DeviceLoad(x + i);
  const float mean = WarpSum(sum) / C;
  float squares = 0.0f;  // biased variance, as the reference
  for (int i = lane; i < C; i += kWarpSize) {
    const float shifted = DeviceLoad(x + i) - mean;
    squares += shifted * shifted;
  }
  const float rstd = 1.0f / sqrtf(WarpSum(squares) / C + kLayerNormEps);
  S* out_row = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += kWarpSize) {
    const float normalized = (DeviceLoad(x + i) - mean) * rstd;
    DeviceStore(out_row + i, normalized * DeviceLoad(weight + i) + DeviceLoad(bias + i));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename S>
__global__ void LayerNormBackwardInputKernel(S* dinp, const S* dout, const S* inp, const S* weight,
                                             const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warp
  const size_t offset = static_cast<size_t>(row) * C;
  const S* x = inp + offset;
  const S* d = dout + offset;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) {
    const float norm = (DeviceLoad(x + i) - m) * s;
    const float dnorm = DeviceLoad(weight + i) * DeviceLoad(d + i);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = WarpSum(dnorm_sum) / C;
  const float dnorm_norm_mean = WarpSum(dnorm_norm_sum) / C;
  S* dinp_row = dinp + offset;
  for (int i = lane; i < C; i += kWarpSize) {
    const float norm = (DeviceLoad(x + i) - m) * s;
    const float dnorm = DeviceLoad(weight + i) * DeviceLoad(d + i);
    const float dval = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    DeviceStore(dinp_row + i, DeviceLoad(dinp_row + i) + dval);
  }
}

}  // namespace

Status LayerNormForward(DType dtype, void* out, float* mean, float* rstd, const void* inp,
                        const void* weight, const void* bias, int N, int C, cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&LayerNormForwardKernel<S>>(
        (N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream, static_cast<S*>(out), mean,
        rstd, static_cast<const S*>(inp), static_cast<const S*>(weight),
        static_cast<const S*>(bias), N, C);
    return 0;
  });
  return LaunchStatus("LayerNormForwardKernel", static_cast<size_t>(N) * C);
}

Status LayerNormBackward(DType dtype, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return absl::OkStatus();
  return DispatchStorage(dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    ::strata::cuda::Launch<&LayerNormBackwardInputKernel<S>>(
        (N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream, static_cast<S*>(dinp),
        static_cast<const S*>(dout), static_cast<const S*>(inp), static_cast<const S*>(weight),
        mean, rstd, N, C);
    RETURN_IF_ERROR(LaunchStatus("LayerNormBackwardInputKernel", static_cast<size_t>(N) * C));
    return ColumnSums(static_cast<S*>(dbias), static_cast<S*>(dweight), static_cast<const S*>(dout),
                      static_cast<const S*>(inp), mean, rstd, N, C, stream);
  });
}

}  // namespace strata::cuda_kernels
