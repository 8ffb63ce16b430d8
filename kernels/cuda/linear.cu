// The non-GEMM parts of a linear layer on CUDA (cuda_kernels.h): the bias broadcast that
// pre-fills the forward GEMM's output (cuda_ops.cc adds the product with beta = 1, so bias
// and product are rounded once together, as the CPU reference in kernels/cpu/matmul.h does)
// and the bias gradient, a fixed-order column sum (column_sums.cuh).
// Thread-safety: launchers are reentrant.
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

template <typename S>
__global__ void BroadcastBiasKernel(S* out, const S* bias, int OC, size_t total) {
  STRATA_GRID_STRIDE_LOOP(index, total) {
    DeviceStore(out + index, bias != nullptr ? DeviceLoad(bias + index % OC) : 0.0f);
  }
}

}  // namespace

Status BroadcastBias(DType dtype, void* out, const void* bias, int N, int OC, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * OC;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&BroadcastBiasKernel<S>>(GridStrideBlocks(total, kThreads), kThreads, 0,
                                                    stream, static_cast<S*>(out),
                                                    static_cast<const S*>(bias), OC, total);
    return 0;
  });
  return LaunchStatus("BroadcastBiasKernel", total);
}

Status BiasBackward(DType dtype, void* dbias, const void* dout, int N, int OC,
                    cudaStream_t stream) {
  return DispatchStorage(dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    return ColumnSums(static_cast<S*>(dbias), static_cast<S*>(nullptr), static_cast<const S*>(dout),
                      static_cast<const S*>(nullptr), nullptr, nullptr, N, OC, stream);
  });
}

}  // namespace strata::cuda_kernels
