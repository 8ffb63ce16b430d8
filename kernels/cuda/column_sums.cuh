// Fixed-order column sums on CUDA: the parameter gradients that sum over rows (LayerNorm's
// dweight and dbias in layernorm.cu, RMSNorm's dweight in rmsnorm.cu, a linear layer's dbias
// in linear.cu).
//
// Two passes, so that they use the whole GPU yet run in an order that does not depend on it:
//  1. grid (ceil(C / 32), G): block (x, g) sums rows [g * R, (g + 1) * R) of 32 columns;
//     thread (column, y) takes rows y, y + 16, ..., then the 16 sums are added in order y.
//     The block writes one fp32 partial per column and sum: partials[sum][g][column].
//  2. one thread per column adds partials[0..G) in order to the stored gradient (one
//     rounding per element).
// G and R depend on N only (MakeColumnGroups), so the result does not depend on the GPU.
// The partials live in stream-ordered scratch (cudaMallocAsync/cudaFreeAsync on the stream,
// at most 2 x 64 x C floats), so concurrent calls on other streams never share it.
// Only included by .cu files. Thread-safety: reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace strata::cuda_kernels {

// dsum[c] += sum_n dout[n, c] if dsum is not null (a bias gradient), and
// dnorm_sum[c] += sum_n norm[n, c] * dout[n, c] if dnorm_sum is not null (a norm's weight
// gradient), with norm = (inp - mean[n]) * rstd[n] for layernorm, or inp * rstd[n] when mean
// is null (RMSNorm); inp, mean and rstd are only read then. At least one of dsum and
// dnorm_sum is not null. S: float or bf16 (instantiated in column_sums.cu).
// Launches nothing when N or C is 0.
template <typename S>
Status ColumnSums(S* dsum, S* dnorm_sum, const S* dout, const S* inp, const float* mean,
                  const float* rstd, int N, int C, cudaStream_t stream);

}  // namespace strata::cuda_kernels
