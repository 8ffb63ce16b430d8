// Host-side launchers of the CUDA kernels behind CudaOps (cuda_ops.h); everything except
// the GEMMs, which CudaOps runs through cuBLAS. The kernels live one op per .cu file, named
// as the sections below (encoder.cu, layernorm.cu, rmsnorm.cu, linear.cu, attention.cu,
// rope.cu, swiglu.cu, elementwise.cu, quantize.cu, cross_entropy.cu, adamw.cu). Each
// launcher enqueues its kernel(s) on `stream` for the storage type `dtype` (every `void*`
// points to elements of it) and returns the launch error, if any, as a Status; faults inside
// a kernel surface at the stream's next synchronisation. Launchers do not check sizes or
// pointers (CudaOps does) and launch nothing when there is no work. The CUDA device of
// `stream` must be current.
//
// Semantics and shapes are those of kernels/ops.h and of the CPU references in
// kernels/cpu/*.h (the specification); backward outputs ACCUMULATE (+=) with one rounding
// per stored element. All reductions run in a fixed order, so results are deterministic.
// Only built where CUDA is. Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"
#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda_kernels {

// The attention kernels keep a head's row in registers, 4 values per lane: hs <= 128.
inline constexpr int kMaxAttentionHeadSize = 128;
// RoPE passes its hs/2 inverse frequencies to the kernel by value: hs <= 256.
inline constexpr int kMaxRopeHeadSize = 256;

// --- encoder (kernels/cpu/encoder.h); wpe / dwpe may be null (no position embedding).
Status EncoderForward(DType dtype, void* out, const int32_t* tokens, const void* wte,
                      const void* wpe, int B, int T, int C, cudaStream_t stream);
// dwte rows: one warp per (first position of a token, 256 channels) sums that token's
// positions in (b, t) order, so the result is bit-identical to the CPU reference.
Status EncoderBackward(DType dtype, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                       int B, int T, int C, cudaStream_t stream);

// --- layernorm (kernels/cpu/layernorm.h)
Status LayerNormForward(DType dtype, void* out, float* mean, float* rstd, const void* inp,
                        const void* weight, const void* bias, int N, int C, cudaStream_t stream);
Status LayerNormBackward(DType dtype, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int N, int C, cudaStream_t stream);

// --- RMSNorm (kernels/cpu/rmsnorm.h): one block per row. dweight is summed like
// LayerNormBackward's (fixed-order column sums, stream-ordered scratch of at most 64 x C floats).
// CopyHeads (kernels/ops.h): heads [first, first + count) of each qkv row to or from rows.
Status CopyHeads(DType dtype, void* qkv, void* rows, int N, int heads_per_row, int first, int count,
                 int hs, bool to_rows, cudaStream_t stream);

Status RmsNormForward(DType dtype, void* out, float* rstd, const void* inp, const void* weight,
                      int N, int C, float eps, cudaStream_t stream);
Status RmsNormBackward(DType dtype, void* dinp, void* dweight, const void* dout, const void* inp,
                       const void* weight, const float* rstd, int N, int C, cudaStream_t stream);

// --- the non-GEMM parts of a linear layer
// out[n, o] = bias[o] (0 where bias is null): the C operand of the forward GEMM (beta = 1),
// so bias and product are summed in fp32 and rounded once.
Status BroadcastBias(DType dtype, void* out, const void* bias, int N, int OC, cudaStream_t stream);
// dbias[o] += sum_n dout[n, o]. Like LayerNormBackward's dweight/dbias, summed per column
// over fixed row chunks (their count depends on N only) into stream-ordered scratch
// (cudaMallocAsync, at most 64 x OC floats, freed on the stream), then over the chunks in order.
Status BiasBackward(DType dtype, void* dbias, const void* dout, int N, int OC, cudaStream_t stream);

// --- attention (kernels/cpu/attention.h), grouped-query: qkv rows [C + 2 * NKV * C/NH];
// C % NH == 0, NH % NKV == 0, C / NH <= kMaxAttentionHeadSize. The backward's dk/dv sum the
// query heads of a group in head order inside one block: deterministic, no atomics.
Status AttentionForward(DType dtype, void* out, float* stats, const void* qkv, int B, int T, int C,
                        int NH, int NKV, cudaStream_t stream);
Status AttentionBackward(DType dtype, void* dqkv, const void* dout, const void* qkv,
                         const void* out, const float* stats, int B, int T, int C, int NH, int NKV,
                         cudaStream_t stream);

// The row kernels of the GEMM attention (kernels/attention_gemm.h AttentionGemmBackend's
// SoftmaxRows, SoftmaxBackwardRows and AddFloatRows, same arguments): one block per row.
Status AttentionSoftmaxRows(DType dtype, void* p, float* stats, int64_t stats_stride,
                            const float* scores, int heads, int T, cudaStream_t stream);
Status AttentionSoftmaxBackwardRows(DType dtype, void* p, void* ds, const float* scores,
                                    const float* dp, const float* stats, int64_t stats_stride,
                                    const void* dout, const void* out, int64_t row_stride,
                                    int64_t head_stride, int hs, int heads, int T,
                                    cudaStream_t stream);
Status AttentionAddFloatRows(DType dtype, void* dst, int64_t row_stride, int64_t head_stride,
                             const float* src, int heads, int T, int hs, cudaStream_t stream);

// --- rotary position embedding (kernels/cpu/rope.h), in place on the q and k heads of
// qkv [B,T,(NH + 2*NKV) * hs]; direction +1 is RopeForward, -1 RopeBackward (the inverse
// rotation). hs even, hs <= kMaxRopeHeadSize.
Status Rope(DType dtype, void* qkv, int B, int T, int NH, int NKV, int hs, const RopeSpec& rope,
            int position0, int direction, cudaStream_t stream);

// --- SwiGLU (kernels/cpu/swiglu.h): inp / dinp [N,2F] rows (gate | up), out / dout [N,F].
Status SwiGluForward(DType dtype, void* out, const void* inp, int N, int F, cudaStream_t stream);
Status SwiGluBackward(DType dtype, void* dinp, const void* inp, const void* dout, int N, int F,
                      cudaStream_t stream);

// One new token's attention over a KV cache (kernels/cpu/attention.h AttentionDecode): one
// block per query head, scores in stream-ordered scratch (NH x T floats, cudaMallocAsync,
// freed on the stream).
Status AttentionDecode(DType dtype, void* out, const void* qkv, int T, int C, int NH, int NKV,
                       cudaStream_t stream);

// --- elementwise (kernels/cpu/elementwise.h)
Status GeluForward(DType dtype, void* out, const void* inp, size_t n, cudaStream_t stream);
Status GeluBackward(DType dtype, void* dinp, const void* inp, const void* dout, size_t n,
                    cudaStream_t stream);
Status Add(DType dtype, void* out, const void* a, const void* b, size_t n, cudaStream_t stream);
Status Accumulate(DType dtype, void* dst, const void* src, size_t n, cudaStream_t stream);
Status AccumulateToFloat(DType dtype, float* dst, const void* src, size_t n, cudaStream_t stream);
// The LoRA column-slice ops, one thread per element of the N x n slice; the product and the
// sum each rounded (__fmul_rn, __fadd_rn, no FMA), as the reference does: bit-identical.
// AddScaledColumns: dst[i, col + j] += alpha * src[i, j] (dst rows of dst_cols elements).
Status AddScaledColumns(DType dtype, void* dst, int dst_cols, int col, const void* src, int N,
                        int n, float alpha, cudaStream_t stream);
// ScaledColumns: dst[i, j] = alpha * src[i, col + j] (src rows of src_cols elements).
Status ScaledColumns(DType dtype, void* dst, const void* src, int src_cols, int col, int N, int n,
                     float alpha, cudaStream_t stream);
// LoRA dropout (kernels/cpu/elementwise.h Dropout): one thread per element of the N x C
// input, the mask of kernels/dropout_mask.h (the CPU's, bit for bit), the quotient and the
// sum each rounded (__fdiv_rn, __fadd_rn), as the reference does: bit-identical. out may be
// in. T >= 1.
Status Dropout(DType dtype, void* out, const void* in, int N, int C, int T, int64_t row0, float p,
               uint64_t key, bool accumulate, cudaStream_t stream);
Status CastFromFloat(DType dtype, void* dst, const float* src, size_t n, cudaStream_t stream);
Status CastToFloat(DType dtype, float* dst, const void* src, size_t n, cudaStream_t stream);
// fp64 partial sums of a fixed grid (independent of the GPU), then one block sums them in
// a fixed order: deterministic for a given n. Allocates 2 KiB of stream-ordered scratch
// (cudaMallocAsync, freed on the stream) per call.
Status SumSquares(float* result, const float* x, size_t n, cudaStream_t stream);

// --- dequantization of a frozen base's pieces (kernels/cpu/quantize.h, docs/quantization.md):
// bit-identical to the CPU references. `offset` is read on the device when the kernel runs.
Status DequantizeNf4(DType dtype, void* out, const uint8_t* codes, const uint8_t* absmax_codes,
                     const float* absmax2, const float* offset, size_t n, cudaStream_t stream);
Status DequantizeInt8(DType dtype, void* out, const int8_t* codes, const float* absmax, size_t n,
                      cudaStream_t stream);
// A bf16 compute dtype: a device-to-device copy.
Status WidenBf16(DType dtype, void* out, const bf16* in, size_t n, cudaStream_t stream);

// --- softmax + cross-entropy (kernels/cpu/cross_entropy.h) over rows of stride Vp whose first
// V columns are the vocabulary; 0 < V <= Vp when N > 0.
Status SoftmaxCrossEntropy(DType dtype, float* losses, void* logits, const int32_t* targets, int N,
                           int V, int Vp, float dloss, cudaStream_t stream);

// --- AdamW (kernels/cpu/adamw.h): the reference's fp32 operations in its order, each
// rounded (no FMA contraction), so results are bit-identical to cpu::AdamWReference.
// param may be null; hp.step >= 1.
Status AdamW(DType dtype, void* param, float* master, const float* grad, float* m, float* v,
             size_t n, const AdamParams& hp, cudaStream_t stream);
// --- AdamW with 8-bit moments (adam8bit.cu; kernels/cpu/adam8bit.h): one CUDA block per block
// of kAdamStateBlock elements, bit-identical to cpu::Adam8bitReference.
Status AdamW8bit(DType dtype, void* param, float* master, const float* grad, uint8_t* m_codes,
                 float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                 const AdamParams& hp, cudaStream_t stream);

}  // namespace strata::cuda_kernels
