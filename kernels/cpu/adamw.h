// CPU AdamW on fp32 master weights, gradients and moments (kernels/ops.h): the scalar
// reference (the specification) and the same scalar loop split over OpenMP threads. A SIMD
// CPU Adam for ZeRO-Offload is separate work; this is the optimizer of the CPU backend.
// T is the storage type of the optional compute-dtype copy of the parameters (float or bf16).
//
// Per element, with g = grad * grad_scale and bias corrections c1 = 1 - beta1^step,
// c2 = 1 - beta2^step (computed once per call, in double, rounded to fp32):
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   master -= lr * ((m / c1) / (sqrt(v / c2) + eps) + weight_decay * master)
//   param = master rounded to T (skipped if param is null).
// Both versions do the same fp32 operations per element, so they agree up to FMA
// contraction. Arrays must not overlap.
// Thread-safety: reentrant; the fast version runs an OpenMP region on the calling thread's
// pool.
#pragma once

#include <cstddef>

#include "kernels/ops.h"  // AdamParams
#include "runtime/core/dtype.h"

namespace strata::cpu {

template <typename T>
void AdamWReference(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                    const AdamParams& hp);
template <typename T>
void AdamW(T* param, float* master, const float* grad, float* m, float* v, size_t n,
           const AdamParams& hp);

}  // namespace strata::cpu
