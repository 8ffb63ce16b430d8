// CPU RMSNorm (LLaMA) over rows of C channels (N rows): a plain reference (the
// specification) and a fast version (OpenMP over rows, vectorised row loops with run-time
// ISA choice). T is the storage type, float or bf16; rstd and arithmetic are fp32.
//
// Forward: out = inp * rstd * weight per row, rstd = 1 / sqrt(mean(inp^2) + eps), saved ([N])
// for the backward.
// Backward: with n = inp * rstd and g = weight * dout,
//   dinp += rstd * (g - n * mean(g * n)),   dweight += sum over rows of dout * n.
// Both ACCUMULATE (+=). Each element of dweight gets the fp32 sum of its rows' contributions
// added once (bf16 parameter gradients are rounded once per call). The reference sums rows
// in order; the fast version sums per-thread partials, so its result depends on the thread
// count (deterministic for a given one).
// Thread-safety: reentrant; fast versions run an OpenMP region on the calling thread's pool.
#pragma once

#include "core/dtype.h"

namespace strata::cpu {

template <typename T>
void RmsNormForwardReference(T* out, float* rstd, const T* inp, const T* weight, int N, int C,
                             float eps);
template <typename T>
void RmsNormForward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps);

template <typename T>
void RmsNormBackwardReference(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                              const float* rstd, int N, int C);
template <typename T>
void RmsNormBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                     const float* rstd, int N, int C);

}  // namespace strata::cpu
