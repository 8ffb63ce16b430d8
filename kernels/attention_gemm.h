// Causal grouped-query attention as matrix products (for tensor cores): the scores of each
// head as a T x T matrix from one GEMM, a row kernel for the softmax, and GEMMs for every
// product of the forward and the backward, so that all the O(T^2 hs) work is GEMMs. The
// order of operations is written once here, against a small backend (the GEMM and three row
// kernels); kernels/cuda runs it with cuBLAS strided-batched GEMMs, and the test runs it
// with plain loops against the CPU reference, so the index arithmetic is checked without a
// GPU. Results and layouts are those of kernels/cpu/attention.h (qkv rows: NH query heads,
// NKV key heads, NKV value heads of hs = C/NH; stats = per-row log-sum-exp; the backward
// adds into dqkv).
//
// Per batch row b and per member m of a query group (query head h = g*G + m of key/value
// head g, G = NH/NKV), one batch of GEMMs runs over the key/value heads g (strided: head g's
// k and v at g*hs, its query head h at g*G*hs), so a GEMM never needs two strides:
//   forward:  S_h = scale Q_h K_g^T (fp32) -> softmax rows: P_h (dtype), stats -> O_h = P_h V_g
//   backward: S_h again, dP_h = dO_h V_g^T (fp32) -> rows: P_h, dS_h = P_h (dP_h - D) (dtype,
//             D_i = dO_i . O_i) -> dV_g += P_h^T dO_h, dK_g += scale dS_h^T Q_h (fp32 sums
//             over the group in member order, added to dqkv once), dQ_h += scale dS_h K_g.
// Scratch: T x T scores per head of a batch (fp32, plus dtype copies, plus dP in the
// backward) in chunks of heads under a budget (at least one head), and the group's fp32
// dK/dV sums. Deterministic when the backend's GEMMs are.
// Thread-safety: stateless; the backend decides.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace strata {

// What the attention needs from a device. Matrices are column-major as in BLAS; strides
// are in elements, between the matrices of a batch.
class AttentionGemmBackend {
 public:
  virtual ~AttentionGemmBackend() = default;

  // For x < batch: C_x = alpha op(A_x) op(B_x) + beta C_x, op(A) m x k, op(B) k x n, C m x n;
  // A and B of `ab` type, C of `c` type, fp32 accumulation.
  virtual Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                      const void* a, int lda, int64_t stride_a, const void* b, int ldb,
                      int64_t stride_b, float beta, void* c, int ldc, int64_t stride_c, int batch,
                      DType ab, DType c_type) = 0;

  // Forward rows, for x < heads and rows i < T: scores S = scores + x*T*T (row i at i*T,
  // already scaled); stats_x = stats + x*stats_stride. Writes stats_x[i] = max_j S_ij +
  // log(sum_j e^(S_ij - max)) over j <= i, and P_x[i*T + j] = e^(S_ij - stats_x[i]) for
  // j <= i, 0 beyond (P of `dtype`, at p + x*T*T).
  virtual Status SoftmaxRows(DType dtype, void* p, float* stats, int64_t stats_stride,
                             const float* scores, int heads, int T) = 0;

  // Backward rows: as SoftmaxRows but P from the given stats, and with D_i = dO_i . O_i
  // (dout and out of `dtype`, row i of head x at x*head_stride + i*row_stride, hs elements),
  // dS_x[i*T + j] = P_ij (dP_ij - D_i) for j <= i, 0 beyond (dp: fp32 like scores).
  virtual Status SoftmaxBackwardRows(DType dtype, void* p, void* ds, const float* scores,
                                     const float* dp, const float* stats, int64_t stats_stride,
                                     const void* dout, const void* out, int64_t row_stride,
                                     int64_t head_stride, int hs, int heads, int T) = 0;

  // dst (dtype) += src (fp32): for x < heads, i < T, d < hs:
  // dst[x*head_stride + i*row_stride + d] += src[(x*T + i)*hs + d], rounded once.
  virtual Status AddFloatRows(DType dtype, void* dst, int64_t row_stride, int64_t head_stride,
                              const float* src, int heads, int T, int hs) = 0;

  // Scratch for the call: `bytes` usable until Release (which frees all of it).
  virtual StatusOr<void*> Scratch(size_t bytes) = 0;
  virtual void Release() = 0;
  // The most scratch the score matrices of one chunk of heads may take (one head may take
  // more).
  virtual size_t scratch_budget() const { return size_t{256} << 20; }
};

// The most scratch one call takes for these shapes (the backward's): what a planner adds to
// the device's memory, since it comes from outside the device tier's pool.
size_t AttentionGemmScratchBytes(DType dtype, int T, int C, int NH, int NKV,
                                 size_t budget = size_t{256} << 20);

// As kernels/cpu/attention.h AttentionForward / AttentionBackward (shapes already checked:
// C % NH == 0, NH % NKV == 0, sizes >= 0).
Status AttentionForwardByGemm(AttentionGemmBackend& backend, DType dtype, void* out, float* stats,
                              const void* qkv, int B, int T, int C, int NH, int NKV);
Status AttentionBackwardByGemm(AttentionGemmBackend& backend, DType dtype, void* dqkv,
                               const void* dout, const void* qkv, const void* out,
                               const float* stats, int B, int T, int C, int NH, int NKV);

}  // namespace strata
