// CountingOps: the Ops of a dry run (`strata plan`). The plan runs the real training set-up
// and steps on a device that allocates nothing (device/cpu_device.h, dry_run), to account
// memory and to count the work a step would do. These kernels check their arguments as the
// CPU backend does (kernels/op_checks.h: sizes, head shapes, column slices, dropout p, the
// pointers the CPU ops require, AdamW's step) and fail the same way, but they enqueue
// nothing and never dereference a pointer: any non-null address will do. Each accepted call
// instead adds what the op would have done to this object's OpCounts and returns OK at once;
// a refused call counts nothing.
//
// Every op adds to exactly one counter, in these units (D = DTypeBytes(dtype()), the compute
// dtype; statistics, losses, fp32 shards and int32 tokens are 4 bytes per element):
//   matmul_flops (a multiply-add is 2 flops; the bias adds of the forward are not counted):
//     MatmulForward   2*N*C*OC
//     MatmulBackward  2*N*C*OC if dinp, + 2*N*C*OC if dweight, + N*OC if dbias (non-null)
//   attention_flops, causal (query t attends keys 0..t: T*(T+1)/2 pairs per sequence and
//   query head; a pair costs 2*hs for q.k and 2*hs for p*v; NKV does not change it):
//     AttentionForward   4*hs*NH * B*T*(T+1)/2 = 2*B*C*T*(T+1)
//     AttentionBackward  2.5x forward = 5*B*C*T*(T+1)  (dV, dP, dQ, dK: 2*hs each per
//                        pair, plus the flash-style recomputation of q.k)
//     AttentionDecode    4*C*T  (one query over T keys: the forward's last row)
//   adam_elements:  AdamW  n (its traffic 28 + D bytes per element)
//   adam8bit_elements:  AdamW8bit  n (16 + D bytes per element plus 16 per 2048-block; the
//                   plan times it at the measured 8-bit CPU Adam rate, cpu_adam8bit_params)
//   elementwise_bytes: every tensor read plus every tensor written, by its element size; an
//   accumulated (+=) output is read and written; small vectors (weights, statistics) count:
//     EncoderForward     4*B*T + D*B*T*C*(2 + [wpe])          (tokens, wte rows, wpe rows, out)
//     EncoderBackward    4*B*T + D*B*T*C*(3 + 2*[dwpe])       (tokens, dout, dwte +=, dwpe +=)
//     LayerNormForward   D*(2*N*C + 2*C) + 8*N                (inp, weight, bias, out, mean, rstd)
//     LayerNormBackward  D*(4*N*C + 5*C) + 8*N                (dout, inp, weight, mean, rstd;
//                                                             dinp, dweight, dbias +=)
//     RmsNormForward     D*(2*N*C + C) + 4*N                  (inp, weight, out, rstd)
//     RmsNormBackward    D*(4*N*C + 3*C) + 4*N                (dout, inp, weight, rstd;
//                                                             dinp, dweight +=)
//     RopeForward/Backward  2*D*B*T*(NH + NKV)*hs             (q and k heads, in place)
//     CopyHeads          2*D*N*count*hs                       (read one side, write the other)
//     SwiGluForward      3*D*N*F        SwiGluBackward  7*D*N*F   (inp [N,2F], dout, dinp +=)
//     GeluForward        2*D*n          GeluBackward    4*D*n
//     Add                3*D*n          Accumulate      3*D*n
//     AddScaledColumns   3*D*N*n        ScaledColumns   2*D*N*n
//     Dropout            (2 + [accumulate])*D*N*C
//     SoftmaxCrossEntropy  D*N*V + 8*N (+ D*N*Vp when dloss != 0: the gradient written back)
//     AccumulateToFloat  (D + 8)*n      CastFromFloat, CastToFloat  (D + 4)*n
//     SumSquares         4*n + 4
//     DequantizeNf4      ceil(n/2) + B + 4*ceil(B/256) + 4 + D*n   (codes, absmax codes, absmax2,
//                                                             offset, out; B = ceil(n/64) blocks)
//     DequantizeInt8     n + 4*B + D*n                        (codes, absmax, out)
//     WidenBf16          (2 + D)*n
//   ([x] is 1 when pointer x is non-null or flag x is set, else 0.)
//   calls: every accepted call, whatever its sizes.
// Counts are doubles: exact for integers below 2^53, plenty for any plan's totals.
//
// Thread-safety: every op and counts()/Reset() may be called from any thread at once; the
// counters are guarded by a mutex, so counts() is a consistent snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace strata {

// The work counted by a CountingOps since its creation or last Reset (units above).
struct OpCounts {
  double matmul_flops = 0;
  double attention_flops = 0;
  double adam_elements = 0;
  double adam8bit_elements = 0;
  double elementwise_bytes = 0;
  uint64_t calls = 0;
  // Calls per GEMM and attention shape, so that a plan can time each shape on the machine:
  // {kind, sizes...}: kMatmulForward {N, C, OC}, kMatmulDinp and kMatmulDweight (the two
  // GEMMs of a MatmulBackward) {N, C, OC}, kAttentionForward and kAttentionBackward
  // {B, T, C, NH, NKV}; unused sizes 0.
  // Also the elementwise ops whose time is compute, not memory traffic, on a CPU (the
  // cross-entropy's exponentials over the vocabulary, GELU's tanh, layernorm):
  // kSoftmaxCrossEntropy {N, V, Vp, with gradient 0/1}, kGeluForward and kGeluBackward {n},
  // kLayerNormForward and kLayerNormBackward {N, C}; `shaped_bytes` is the part of
  // elementwise_bytes these calls counted.
  enum ShapeKind { kMatmulForward, kMatmulDinp, kMatmulDweight, kAttentionForward,
                   kAttentionBackward, kSoftmaxCrossEntropy, kGeluForward, kGeluBackward,
                   kLayerNormForward, kLayerNormBackward };
  std::map<std::array<int, 6>, double> shapes;
  double shaped_bytes = 0;
};

class CountingOps : public Ops {
 public:
  explicit CountingOps(DType dtype) : dtype_(dtype) {}

  OpCounts counts() const;
  void Reset();

  DType dtype() const override { return dtype_; }

  Status EncoderForward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                        const void* wpe, int B, int T, int C) override;
  Status EncoderBackward(Stream& s, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                         int B, int T, int C) override;
  Status LayerNormForward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                          const void* weight, const void* bias, int N, int C) override;
  Status LayerNormBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                           const void* inp, const void* weight, const float* mean,
                           const float* rstd, int N, int C) override;
  Status MatmulForward(Stream& s, void* out, const void* inp, const void* weight, const void* bias,
                       int N, int C, int OC) override;
  Status MatmulBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                        const void* inp, const void* weight, int N, int C, int OC) override;
  Status AttentionForward(Stream& s, void* out, float* stats, const void* qkv, int B, int T, int C,
                          int NH, int NKV) override;
  Status AttentionBackward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                           const void* out, const float* stats, int B, int T, int C, int NH,
                           int NKV) override;
  Status AttentionDecode(Stream& s, void* out, const void* qkv, int T, int C, int NH,
                         int NKV) override;
  Status RmsNormForward(Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                        int N, int C, float eps) override;
  Status RmsNormBackward(Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                         const void* weight, const float* rstd, int N, int C) override;
  Status RopeForward(Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs,
                     const RopeSpec& rope, int position0) override;
  Status RopeBackward(Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs,
                      const RopeSpec& rope, int position0) override;
  Status CopyHeads(Stream& s, void* qkv, void* rows, int N, int heads_per_row, int first, int count,
                   int hs, bool to_rows) override;
  Status SwiGluForward(Stream& s, void* out, const void* inp, int N, int F) override;
  Status SwiGluBackward(Stream& s, void* dinp, const void* inp, const void* dout, int N,
                        int F) override;
  Status GeluForward(Stream& s, void* out, const void* inp, size_t n) override;
  Status GeluBackward(Stream& s, void* dinp, const void* inp, const void* dout, size_t n) override;
  Status Add(Stream& s, void* out, const void* a, const void* b, size_t n) override;
  Status Accumulate(Stream& s, void* dst, const void* src, size_t n) override;
  Status AddScaledColumns(Stream& s, void* dst, int dst_cols, int col, const void* src, int N,
                          int n, float alpha) override;
  Status ScaledColumns(Stream& s, void* dst, const void* src, int src_cols, int col, int N, int n,
                       float alpha) override;
  Status Dropout(Stream& s, void* out, const void* in, int N, int C, int T, int64_t row0, float p,
                 uint64_t key, bool accumulate) override;
  Status SoftmaxCrossEntropy(Stream& s, float* losses, void* logits, const int32_t* targets, int N,
                             int V, int Vp, float dloss) override;
  Status AccumulateToFloat(Stream& s, float* dst, const void* src, size_t n) override;
  Status CastFromFloat(Stream& s, void* dst, const float* src, size_t n) override;
  Status CastToFloat(Stream& s, float* dst, const void* src, size_t n) override;
  Status SumSquares(Stream& s, float* result, const float* x, size_t n) override;
  Status DequantizeNf4(Stream& s, void* out, const uint8_t* codes, const uint8_t* absmax_codes,
                       const float* absmax2, const float* offset, size_t n) override;
  Status DequantizeInt8(Stream& s, void* out, const int8_t* codes, const float* absmax,
                        size_t n) override;
  Status WidenBf16(Stream& s, void* out, const bf16* in, size_t n) override;
  Status AdamW(Stream& s, void* param, float* master, const float* grad, float* m, float* v,
               size_t n, const AdamParams& hp) override;
  Status AdamW8bit(Stream& s, void* param, float* master, const float* grad, uint8_t* m_codes,
                   float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                   const AdamParams& hp) override;

 private:
  // Adds one accepted call and its work to the counters; returns OK.
  Status Count(const OpCounts& work);
  // Count, with one call of each shape in `shapes` recorded.
  Status CountShapes(const OpCounts& work, std::initializer_list<std::array<int, 6>> shapes);
  // The compute dtype's element size, as a double for the byte formulas.
  double D() const { return static_cast<double>(DTypeBytes(dtype_)); }

  const DType dtype_;
  mutable std::mutex mutex_;
  OpCounts counts_;  // guarded by mutex_
};

std::unique_ptr<CountingOps> MakeCountingOps(DType dtype);

}  // namespace strata
