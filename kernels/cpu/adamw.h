// CPU AdamW on fp32 master weights, gradients and moments (kernels/ops.h): the scalar
// reference, the specification that the SIMD CPU Adam (kernels/cpu/cpu_adam.h, what the
// backends run) and the CUDA AdamW follow.
// T is the storage type of the optional compute-dtype copy of the parameters (float or bf16).
//
// Per element, with g = grad * grad_scale and bias corrections c1 = 1 - beta1^step,
// c2 = 1 - beta2^step (computed once per call, in double, rounded to fp32, by
// kernels/adam_math.h as every AdamW does):
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + ((1 - beta2) * g) * g
//   master -= lr * ((m / c1) / (sqrt(v / c2) + eps) + weight_decay * master)
//   param = master rounded to T (skipped if param is null).
// Arrays must not overlap.
// Thread-safety: reentrant.
#pragma once

#include <cstddef>

#include "kernels/ops.h"  // AdamParams
#include "core/dtype.h"

namespace strata::cpu {

template <typename T>
void AdamWReference(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                    const AdamParams& hp);

}  // namespace strata::cpu
