// AdamW on CUDA (cuda_kernels.h; specification: cpu::AdamWReference in kernels/cpu/adamw.h).
// A grid-stride loop, one thread per element. Every fp32 operation of the reference is done
// in its order with an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn,
// __fsqrt_rn), which nvcc never contracts into an FMA, and the per-step constants are the
// reference's, computed on the host by kernels/adam_math.h: the results are bit-identical.
// Thread-safety: launchers are reentrant.
#include "kernels/adam_math.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

template <typename S>
__global__ void AdamWKernel(S* param, float* master, const float* grad, float* m, float* v,
                            size_t n, AdamConstants k) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const float g = __fmul_rn(grad[i], k.grad_scale);
    const float m_new = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float v_new =
        __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float m_hat = __fdiv_rn(m_new, k.bias_correction1);
    const float v_hat = __fdiv_rn(v_new, k.bias_correction2);
    const float p = master[i];
    const float update = __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), k.eps)),
                                   __fmul_rn(k.weight_decay, p));
    const float p_new = __fadd_rn(p, -__fmul_rn(k.lr, update));
    m[i] = m_new;
    v[i] = v_new;
    master[i] = p_new;
    if (param != nullptr) DeviceStore(param + i, p_new);
  }
}

}  // namespace

Status AdamW(DType dtype, void* param, float* master, const float* grad, float* m, float* v,
             size_t n, const AdamParams& hp, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  // On the host, as every AdamW computes them (kernels/adam_math.h).
  const AdamConstants k = MakeAdamConstants(hp);
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AdamWKernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0, stream,
                                            static_cast<S*>(param), master, grad, m, v, n, k);
    return 0;
  });
  return LaunchStatus("AdamWKernel", n);
}

}  // namespace strata::cuda_kernels
