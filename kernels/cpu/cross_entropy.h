// CPU fused softmax + cross-entropy over N rows of logits [N,Vp] (kernels/ops.h), the
// softmax over each row's first V (the real vocabulary; columns [V,Vp) are padding): a plain
// reference (the specification) and a fast version (OpenMP over rows, vectorised row loops
// with ExpApprox and run-time ISA choice). T is the storage type of the logits, float or
// bf16; losses and all arithmetic are fp32, with the row maximum subtracted before exp.
//
// losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]] (= -log softmax[target]).
// If dloss != 0, logits[n,:] is then OVERWRITTEN (not accumulated: the logits are consumed)
// with dloss * (softmax(logits[n,:]) - onehot(targets[n])), the gradient of
// dloss * sum(losses), and the padding columns with 0. Requires 0 <= targets[n] < V <= Vp
// (not checked).
// Thread-safety: reentrant; the fast version runs an OpenMP region on the calling thread's
// pool, one row per thread at a time, so it parallelises only when N > 1.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

template <typename T>
void SoftmaxCrossEntropyReference(float* losses, T* logits, const int32_t* targets, int N, int V,
                                  int Vp, float dloss);
template <typename T>
void SoftmaxCrossEntropy(float* losses, T* logits, const int32_t* targets, int N, int V, int Vp,
                         float dloss);

}  // namespace strata::cpu
