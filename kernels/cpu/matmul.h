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

// bf16 through fp32 GEMMs, what the two above run where oneDNN has no bf16 GEMM (oneDNN
// 2.6 without AVX-512): blocks of weight rows and of input rows widened to fp32 (exact),
// the fp32 GEMM, each output rounded to bf16 once (backward: old + the fp32 sum over every
// block). dinp and dweight (each skipped if null) accumulate; no dbias. Scratch: three
// blocks of about 8 MiB per calling thread. `tiling` (0: automatic) sets the blocks (tests);
// with the automatic one, a forward of up to 4 rows (decoding) is dot products of the
// widened rows with the bf16 weights instead (the weights read once, as they are).
struct WidenedTiling {
  int weight_rows = 0;  // rows of the weight (OC) per block
  int input_rows = 0;   // rows of the input (N) per block
};
void MatmulForwardWidened(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N,
                          int C, int OC, WidenedTiling tiling = {});
void MatmulBackwardWidened(bf16* dinp, bf16* dweight, const bf16* dout, const bf16* inp,
                           const bf16* weight, int N, int C, int OC, WidenedTiling tiling = {});

template <typename T>
void MatmulForwardReference(T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                            int OC);
template <typename T>
void MatmulBackwardReference(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                             const T* weight, int N, int C, int OC);

}  // namespace strata::cpu
