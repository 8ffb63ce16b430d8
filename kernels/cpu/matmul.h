// CPU matmuls of the GPT model (linear layers): a plain reference (the specification)
// and a fast version through oneDNN's matmul primitive (bf16 inputs use AVX512-BF16
// where the CPU has it; accumulation is always fp32). T is float or bf16.
// Shapes: inp [N,C], weight [OC,C] (row-major, PyTorch Linear layout), out [N,OC].
// Backward outputs ACCUMULATE (+=), as every backward op of kernels/ops.h.
// Thread-safety: functions are reentrant; the fast path caches oneDNN primitives in a
// thread-safe cache and runs on the calling thread's OpenMP pool.
#pragma once

#include "core/dtype.h"

namespace strata::cpu {

// out = inp * weight^T + bias (bias may be null).
template <typename T>
void MatmulForward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp += dout * weight (skipped if null); dweight += dout^T * inp (skipped if null: a
// frozen weight, no GEMM); dbias += column sums of dout (skipped if null).
template <typename T>
void MatmulBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                    const T* weight, int N, int C, int OC);

template <typename T>
void MatmulForwardReference(T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                            int OC);
template <typename T>
void MatmulBackwardReference(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                             const T* weight, int N, int C, int OC);

}  // namespace strata::cpu
