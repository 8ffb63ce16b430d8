// CPU SwiGLU (LLaMA's MLP activation, kernels/ops.h SwiGluForward/Backward): a plain
// reference (the specification) and a fast version (OpenMP over rows, vectorised with
// ExpApprox and run-time ISA choice). Rows of inp [N,2F] are (gate | up);
// out [N,F] = silu(gate) * up, silu(x) = x * sigmoid(x).
// Backward ACCUMULATES (+=) into dinp [N,2F]:
//   dgate += dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))),  dup += dout * silu(gate).
// Storage `T` float or bf16; arithmetic fp32. The reference uses std::exp, the fast version
// ExpApprox (relative error < 1.5e-7).
// Thread-safety: reentrant; the fast version runs an OpenMP region on the calling thread's pool.
#pragma once

#include "core/dtype.h"

namespace strata::cpu {

template <typename T>
void SwiGluForwardReference(T* out, const T* inp, int N, int F);
template <typename T>
void SwiGluForward(T* out, const T* inp, int N, int F);

template <typename T>
void SwiGluBackwardReference(T* dinp, const T* inp, const T* dout, int N, int F);
template <typename T>
void SwiGluBackward(T* dinp, const T* inp, const T* dout, int N, int F);

}  // namespace strata::cpu
