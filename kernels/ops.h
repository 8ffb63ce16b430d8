// Ops: the kernel set of the GPT and LLaMA models, dispatched on a Stream. One implementation per
// backend (kernels/cpu/cpu_ops.h, kernels/cuda/cuda_ops.h), created for one compute dtype: every
// `void*` below points to elements of that dtype (fp32 or bf16) in device-tier memory.
// Layernorm statistics, attention statistics, losses and optimizer state are always fp32.
// Token ids are int32.
//
// Accumulation rule: every backward output (activation and parameter gradients) is
// ACCUMULATED (+=) into its buffer; callers zero gradient buffers before first use. This
// lets residual branches and a weight used twice (the tied embedding) add up naturally.
// Forward outputs are overwritten.
//
// Calls only enqueue work; pointers must stay valid until the stream has run it.
// Thread-safety: an Ops object is stateless apart from its configuration and may be
// used from any thread; ordering is the stream's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "core/dtype.h"
#include "core/rope.h"
#include "core/status.h"

namespace strata {

// Hyper-parameters of one AdamW update (decoupled weight decay, bias-corrected).
struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // applied as param -= lr * weight_decay * param
  int step = 1;               // 1-based, for bias correction
  float grad_scale = 1.0f;    // multiplies the gradient first (global-norm clipping)
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual DType dtype() const = 0;

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; wpe may be null (no position embedding:
  // LLaMA), then out[b,t,:] = wte[tokens[b,t],:].
  virtual Status EncoderForward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                                const void* wpe, int B, int T, int C) = 0;
  // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (skipped when dwpe is null).
  virtual Status EncoderBackward(Stream& s, void* dwte, void* dwpe, const void* dout,
                                 const int32_t* tokens, int B, int T, int C) = 0;

  // out = (inp - mean) * rstd * weight + bias per row of C; eps 1e-5. mean/rstd: [N].
  virtual Status LayerNormForward(Stream& s, void* out, float* mean, float* rstd,
                                  const void* inp, const void* weight, const void* bias,
                                  int N, int C) = 0;
  virtual Status LayerNormBackward(Stream& s, void* dinp, void* dweight, void* dbias,
                                   const void* dout, const void* inp, const void* weight,
                                   const float* mean, const float* rstd, int N, int C) = 0;

  // out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC] (bias may be null).
  virtual Status MatmulForward(Stream& s, void* out, const void* inp, const void* weight,
                               const void* bias, int N, int C, int OC) = 0;
  // dinp[N,C] += dout * weight; dweight[OC,C] += dout^T * inp; dbias[OC] += sum_n dout.
  // dinp, dweight and dbias may be null (skipped): a null dweight (a frozen weight, e.g. the
  // base of a LoRA model) skips the weight-gradient GEMM entirely; dinp is the same either way.
  virtual Status MatmulBackward(Stream& s, void* dinp, void* dweight, void* dbias,
                                const void* dout, const void* inp, const void* weight, int N,
                                int C, int OC) = 0;

  // Causal self-attention with grouped-query heads: NH query heads, NKV key/value heads
  // (NH % NKV == 0; NKV == NH is multi-head attention, as GPT-2). hs = C/NH, scale
  // 1/sqrt(hs). qkv: [B,T,C + 2*NKV*hs] laid out as (q: NH heads | k: NKV heads | v: NKV
  // heads), head h at channels [h*hs, (h+1)*hs) of q; query head h attends with key/value
  // head h / (NH/NKV) (Hugging Face's repeat_kv order). out: [B,T,C].
  // stats: [B,NH,T] fp32, the log-sum-exp of each softmax row (for the backward).
  virtual Status AttentionForward(Stream& s, void* out, float* stats, const void* qkv, int B,
                                  int T, int C, int NH, int NKV) = 0;
  // dqkv += gradient of out w.r.t. qkv, given dout, the forward's qkv, out and stats.
  virtual Status AttentionBackward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                                   const void* out, const float* stats, int B, int T, int C,
                                   int NH, int NKV) = 0;

  // Attention of one new token (generation with a KV cache, one sequence): qkv [T, C +
  // 2*NKV*hs] holds, in rows 0..T-1, the keys and values (rotated, for LLaMA) of positions
  // 0..T-1 and, in row T-1, the new token's query; out [C] = that query's attention over
  // keys 0..T-1 (the last row of AttentionForward on the same qkv). O(T) per call.
  virtual Status AttentionDecode(Stream& s, void* out, const void* qkv, int T, int C, int NH,
                                 int NKV) = 0;

  // RMSNorm (LLaMA): out = inp * rstd * weight per row of C, rstd = 1/sqrt(mean(inp^2) + eps);
  // rstd: [N] fp32, saved for the backward.
  virtual Status RmsNormForward(Stream& s, void* out, float* rstd, const void* inp,
                                const void* weight, int N, int C, float eps) = 0;
  // dinp += d out/d inp . dout; dweight += sum_n dout * inp * rstd.
  virtual Status RmsNormBackward(Stream& s, void* dinp, void* dweight, const void* dout,
                                 const void* inp, const void* weight, const float* rstd, int N,
                                 int C) = 0;

  // Rotary position embedding, Hugging Face's "rotate half" layout, IN PLACE on the q and k
  // heads of qkv (layout as AttentionForward; v untouched): for each head and i < hs/2, the
  // pair (x_i, x_{i+hs/2}) of the token at position p = position0 + t is rotated by the
  // angle p * inv_freq_i, the inverse frequencies of `rope` (core/rope.h: theta^(-2i/hs),
  // scaled as it says). hs must be even.
  virtual Status RopeForward(Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs,
                             const RopeSpec& rope, int position0) = 0;
  // The backward of RopeForward, IN PLACE on dqkv (an exception to the accumulation rule: a
  // rotation's gradient is the inverse rotation of the incoming gradient): rotates the q
  // and k parts of dqkv by the negative angles, turning the gradient w.r.t. the rotated
  // q, k into the gradient w.r.t. the unrotated ones.
  virtual Status RopeBackward(Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs,
                              const RopeSpec& rope, int position0) = 0;

  // Copies attention heads between qkv [N, heads_per_row * hs] and rows of their own
  // [N * count, hs]: heads [first, first + count) of each qkv row, row n's head first + j at
  // rows[(n * count + j) * hs]; to_rows: qkv -> rows, else rows -> qkv (other heads
  // untouched). Exact. So per-head operations over contiguous rows (Qwen3's q/k RMSNorm with
  // RmsNorm*) run on a qkv buffer's heads.
  virtual Status CopyHeads(Stream& s, void* qkv, void* rows, int N, int heads_per_row, int first,
                           int count, int hs, bool to_rows) = 0;

  // SwiGLU (LLaMA's MLP): inp [N,2F] per row (gate | up); out [N,F] = silu(gate) * up,
  // silu(x) = x / (1 + e^-x).
  virtual Status SwiGluForward(Stream& s, void* out, const void* inp, int N, int F) = 0;
  // dinp [N,2F] += the gradient of out w.r.t. (gate | up) given dout [N,F].
  virtual Status SwiGluBackward(Stream& s, void* dinp, const void* inp, const void* dout, int N,
                                int F) = 0;

  // GELU, tanh approximation (as GPT-2).
  virtual Status GeluForward(Stream& s, void* out, const void* inp, size_t n) = 0;
  virtual Status GeluBackward(Stream& s, void* dinp, const void* inp, const void* dout,
                              size_t n) = 0;

  // out = a + b (residual forward); out may alias a or b.
  virtual Status Add(Stream& s, void* out, const void* a, const void* b, size_t n) = 0;
  // dst += src (compute dtype both).
  virtual Status Accumulate(Stream& s, void* dst, const void* src, size_t n) = 0;

  // The LoRA update of a column slice of a (possibly fused) projection's output:
  // dst[i, col + j] += alpha * src[i, j] for i < N, j < n (dst rows have dst_cols elements,
  // src rows n; col + n <= dst_cols). Computed in fp32 (the product, then the sum; no FMA,
  // so every backend gives the same bits), rounded once to the dtype. Other columns of dst
  // are untouched.
  virtual Status AddScaledColumns(Stream& s, void* dst, int dst_cols, int col, const void* src,
                                  int N, int n, float alpha) = 0;
  // Its backward: dst[i, j] = alpha * src[i, col + j] (src rows have src_cols elements, dst
  // rows n; col + n <= src_cols). An exception to the accumulation rule: dst is OVERWRITTEN
  // (it is the gradient of the adapter's own output, a scratch buffer, not a shared one).
  virtual Status ScaledColumns(Stream& s, void* dst, const void* src, int src_cols, int col, int N,
                               int n, float alpha) = 0;

  // LoRA dropout on an adapter's input: out[i, c] = in[i, c] * keep(i, c) / (1 - p) for rows
  // i < N of C channels (accumulate: out[i, c] += that instead). keep is 0 with probability
  // p and a function of (key, row0 + i / T, i % T, c) only: the global sample row, the
  // position in it and the channel, so any split of the same rows over ranks and micro-
  // batches draws the same mask. p in [0, 1); p == 0 copies (or adds) in unchanged.
  // keep is DropoutKeep of kernels/dropout_mask.h on every backend. A kept element is the
  // fp32 quotient in / (1 - p) (plus out, when accumulating), rounded once to the dtype; a
  // dropped one contributes exactly 0 (a select, not a product: even for an inf or NaN
  // input). out may be in itself (in place) but must not overlap it otherwise.
  // Requires N, C, row0 >= 0 and T >= 1.
  virtual Status Dropout(Stream& s, void* out, const void* in, int N, int C, int T, int64_t row0,
                         float p, uint64_t key, bool accumulate) = 0;

  // Fused softmax + cross-entropy over rows of logits [N,Vp]: the softmax runs over the
  // first V (the real vocabulary, V <= Vp); columns [V, Vp) are padding (a padded
  // vocabulary, e.g. GPT-2's 50,257 in 50,304) and take no part. losses[n] =
  // -log softmax[target]. If dloss != 0, logits[n, :V] are replaced by dloss * (softmax -
  // onehot(target)), i.e. the gradient of dloss * sum(losses), and logits[n, V:] by 0; the
  // forward values are not needed afterwards.
  virtual Status SoftmaxCrossEntropy(Stream& s, float* losses, void* logits,
                                     const int32_t* targets, int N, int V, int Vp,
                                     float dloss) = 0;

  // dst[i] (fp32) += src[i] (compute dtype): gradient accumulation into fp32 shards.
  virtual Status AccumulateToFloat(Stream& s, float* dst, const void* src, size_t n) = 0;
  // dst (compute dtype) = src (fp32), rounded to nearest even for bf16.
  virtual Status CastFromFloat(Stream& s, void* dst, const float* src, size_t n) = 0;
  // dst (fp32) = src (compute dtype).
  virtual Status CastToFloat(Stream& s, float* dst, const void* src, size_t n) = 0;
  // *result (fp32, device memory) = sum of x[i]^2, accumulated in fp64.
  virtual Status SumSquares(Stream& s, float* result, const float* x, size_t n) = 0;

  // Decoding of one piece of a quantized frozen base (docs/quantization.md; the CPU
  // reference is kernels/cpu/quantize.h): out = the piece's first n values in the compute
  // dtype, each the fp32 value of the specification rounded once (to nearest even for bf16),
  // bit-identical on every backend. The piece's arrays are in device memory, laid out as
  // PieceLayout (core/quant_format.h) says; NF4's `offset` points to the piece's one fp32
  // offset (read when the kernel runs, as the host cannot read device memory when it
  // enqueues). out must not overlap the piece.
  virtual Status DequantizeNf4(Stream& s, void* out, const uint8_t* codes,
                               const uint8_t* absmax_codes, const float* absmax2,
                               const float* offset, size_t n) = 0;
  virtual Status DequantizeInt8(Stream& s, void* out, const int8_t* codes, const float* absmax,
                                size_t n) = 0;
  // out (compute dtype) = in (bf16): a bf16 base widened, or copied when the compute dtype is
  // bf16. (CastToFloat reads the compute dtype, so it cannot serve an fp32 run's bf16 base.)
  virtual Status WidenBf16(Stream& s, void* out, const bf16* in, size_t n) = 0;

  // AdamW on fp32 master/m/v with fp32 grads; also writes the updated master into
  // `param` in the compute dtype (may be null to skip).
  virtual Status AdamW(Stream& s, void* param, float* master, const float* grad, float* m,
                       float* v, size_t n, const AdamParams& hp) = 0;
  // AdamW with 8-bit moments (docs/quantization.md "8-bit Adam states"; CPU reference:
  // cpu::Adam8bitReference in kernels/cpu/adam8bit.h): m and v as one code per element
  // (m_codes: signed dynamic map, v_codes: unsigned) and an fp32 absmax per block of
  // kAdamStateBlock = 2048 elements (m_absmax, v_absmax: ceil(n / 2048) each). [0, n) starts
  // on a block boundary; every block is whole except possibly the last. Decodes, updates
  // exactly as AdamW (master, and param in the compute dtype unless null), re-encodes;
  // bit-identical on every backend. No two arrays may overlap.
  virtual Status AdamW8bit(Stream& s, void* param, float* master, const float* grad,
                           uint8_t* m_codes, float* m_absmax, uint8_t* v_codes, float* v_absmax,
                           size_t n, const AdamParams& hp) = 0;
};

}  // namespace strata
