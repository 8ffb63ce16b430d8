// SwiGLU on CUDA (cuda_kernels.h; specification: kernels/cpu/swiglu.h): grid-stride loops
// with one thread per output element (n, i), reading gate inp[n, i] and up inp[n, F + i];
// the reference's fp32 formulas in its order (CUDA's expf instead of std::exp), one rounding
// per stored element.
// Thread-safety: launchers are reentrant.
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// out [N,F] = silu(gate) * up.
template <typename S>
__global__ void SwiGluForwardKernel(S* out, const S* inp, int F, size_t total) {
  STRATA_GRID_STRIDE_LOOP(index, total) {
    const size_t n = index / F;
    const size_t i = index % F;
    const S* gate = inp + n * 2 * F;
    const float g = DeviceLoad(gate + i);
    const float silu = g / (1.0f + expf(-g));
    DeviceStore(out + index, silu * DeviceLoad(gate + F + i));
  }
}

// dgate += dout * up * silu'(gate), dup += dout * silu(gate), with
// silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
template <typename S>
__global__ void SwiGluBackwardKernel(S* dinp, const S* inp, const S* dout, int F, size_t total) {
  STRATA_GRID_STRIDE_LOOP(index, total) {
    const size_t n = index / F;
    const size_t i = index % F;
    const size_t gate_index = n * 2 * F + i, up_index = gate_index + F;
    const float g = DeviceLoad(inp + gate_index), u = DeviceLoad(inp + up_index);
    const float d = DeviceLoad(dout + index);
    const float sigmoid = 1.0f / (1.0f + expf(-g));
    const float dsilu = sigmoid * (1.0f + g * (1.0f - sigmoid));
    DeviceStore(dinp + gate_index, DeviceLoad(dinp + gate_index) + d * u * dsilu);
    DeviceStore(dinp + up_index, DeviceLoad(dinp + up_index) + d * g * sigmoid);
  }
}

}  // namespace

Status SwiGluForward(DType dtype, void* out, const void* inp, int N, int F, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * F;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&SwiGluForwardKernel<S>>(GridStrideBlocks(total, kThreads), kThreads, 0,
                                                    stream, static_cast<S*>(out),
                                                    static_cast<const S*>(inp), F, total);
    return 0;
  });
  return LaunchStatus("SwiGluForwardKernel", total);
}

Status SwiGluBackward(DType dtype, void* dinp, const void* inp, const void* dout, int N, int F,
                      cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * F;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&SwiGluBackwardKernel<S>>(
        GridStrideBlocks(total, kThreads), kThreads, 0, stream, static_cast<S*>(dinp),
        static_cast<const S*>(inp), static_cast<const S*>(dout), F, total);
    return 0;
  });
  return LaunchStatus("SwiGluBackwardKernel", total);
}

}  // namespace strata::cuda_kernels
