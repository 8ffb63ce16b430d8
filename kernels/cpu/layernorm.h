// CPU layernorm over rows of C channels (N rows, e.g. N = B*T): a plain reference (the
// specification) and a fast version (OpenMP over rows, vectorised row loops with run-time
// ISA choice). T is the storage type, float or bf16; statistics and arithmetic are fp32.
//
// Forward: out = (inp - mean) * rstd * weight + bias per row, rstd = 1 / sqrt(var + 1e-5)
// with the biased variance; mean and rstd ([N], fp32) are saved for the backward.
// Backward: dinp, dweight and dbias ACCUMULATE (+=). For each element of dweight and dbias
// the contributions of all rows are summed in fp32 and added to the stored value once, so
// bf16 parameter gradients are rounded once per call, not once per row. The reference sums
// rows in order; the fast version sums per-thread partials, so its result depends on the
// thread count (deterministic for a given one).
// Thread-safety: reentrant; fast versions run an OpenMP region on the calling thread's pool.
#pragma once

#include "core/dtype.h"

namespace strata::cpu {

inline constexpr float kLayerNormEps = 1e-5f;

template <typename T>
void LayerNormForwardReference(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                               const T* bias, int N, int C);
template <typename T>
void LayerNormForward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                      const T* bias, int N, int C);

template <typename T>
void LayerNormBackwardReference(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                                const T* weight, const float* mean, const float* rstd, int N,
                                int C);
template <typename T>
void LayerNormBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                       const float* mean, const float* rstd, int N, int C);

}  // namespace strata::cpu
