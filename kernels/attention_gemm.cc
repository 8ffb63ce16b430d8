// The order of attention_gemm.h's GEMMs and row kernels. Column-major GEMMs on row-major
// matrices: a row-major [R, K] matrix with row stride ld is a column-major [K, R] one with
// leading dimension ld, so each row-major product X = Y Z is issued as X^T = Z^T Y^T.
#include "kernels/attention_gemm.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// Element offset -> pointer, for buffers of `dtype` elements.
const void* At(const void* base, int64_t elements, DType dtype) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(DTypeBytes(dtype));
}
void* At(void* base, int64_t elements, DType dtype) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(DTypeBytes(dtype));
}

struct Shape {
  int B, T, C, NH, NKV, hs, G;
  int64_t rs;  // elements per qkv row
  float scale;
};

Shape MakeShape(int B, int T, int C, int NH, int NKV) {
  Shape s{B, T, C, NH, NKV, C / NH, NH / NKV, 0, 0.0f};
  s.rs = static_cast<int64_t>(C) + 2 * static_cast<int64_t>(NKV) * s.hs;
  s.scale = 1.0f / std::sqrt(static_cast<float>(s.hs));  // as the CPU reference
  return s;
}

// Scratch sections start at 256-byte boundaries (the GEMMs' fast paths want aligned
// operands).
size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Key/value heads per chunk: score matrices of `bytes_per_head` each within `budget`.
int HeadsPerChunk(size_t budget, const Shape& s, size_t bytes_per_head) {
  const size_t fit = budget / std::max<size_t>(1, bytes_per_head);
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(fit, s.NKV)));
}

// S_h = scale Q_h K_g^T for the n heads g0.. of member m in batch row b (row-major T x T
// at scores + x*T*T): column-major S^T = op_T(K^T) op_N(Q^T).
Status Scores(AttentionGemmBackend& backend, DType dtype, const Shape& s, const void* qkv_b, int m,
              int g0, int n, float* scores) {
  const int64_t TT = static_cast<int64_t>(s.T) * s.T;
  return backend.Gemm(
      true, false, s.T, s.T, s.hs, s.scale, At(qkv_b, s.C + static_cast<int64_t>(g0) * s.hs, dtype),
      s.rs, s.hs, At(qkv_b, (static_cast<int64_t>(g0) * s.G + m) * s.hs, dtype), s.rs,
      static_cast<int64_t>(s.G) * s.hs, 0.0f, scores, s.T, TT, n, dtype, DType::kF32);
}

// The backward's scratch: sections for scores and dP (fp32, T x T per head of a chunk), the
// dK and dV sums (fp32, every key/value head), P and dS (dtype).
struct BackwardScratch {
  int chunk;
  size_t matrix32, sums, matrix;
  size_t total() const { return 2 * matrix32 + 2 * sums + 2 * matrix; }
};

BackwardScratch BackwardLayout(DType dtype, const Shape& s, size_t budget) {
  const size_t TT = static_cast<size_t>(s.T) * s.T;
  const int chunk = HeadsPerChunk(budget, s, TT * 2 * (sizeof(float) + DTypeBytes(dtype)));
  BackwardScratch layout;
  layout.chunk = chunk;
  layout.matrix32 = Aligned(sizeof(float) * TT * chunk);
  layout.sums = Aligned(sizeof(float) * static_cast<size_t>(s.NKV) * s.T * s.hs);
  layout.matrix = Aligned(DTypeBytes(dtype) * TT * chunk);
  return layout;
}

}  // namespace

size_t AttentionGemmScratchBytes(DType dtype, int T, int C, int NH, int NKV, size_t budget) {
  if (T <= 0 || NH <= 0 || NKV <= 0 || C <= 0) return 0;
  return BackwardLayout(dtype, MakeShape(1, T, C, NH, NKV), budget).total();
}

Status AttentionForwardByGemm(AttentionGemmBackend& backend, DType dtype, void* out, float* stats,
                              const void* qkv, int B, int T, int C, int NH, int NKV) {
  if (B == 0 || T == 0) return absl::OkStatus();
  const Shape s = MakeShape(B, T, C, NH, NKV);
  const int64_t TT = static_cast<int64_t>(T) * T;
  const size_t per_head = static_cast<size_t>(TT) * (sizeof(float) + DTypeBytes(dtype));
  const int chunk = HeadsPerChunk(backend.scratch_budget(), s, per_head);
  const size_t scores_bytes = Aligned(sizeof(float) * TT * chunk);
  ASSIGN_OR_RETURN(void* scratch, backend.Scratch(scores_bytes + DTypeBytes(dtype) * TT * chunk));
  float* scores = static_cast<float*>(scratch);
  void* probs = static_cast<char*>(scratch) + scores_bytes;
  Status status;
  for (int b = 0; b < B && status.ok(); ++b) {
    const void* qkv_b = At(qkv, static_cast<int64_t>(b) * T * s.rs, dtype);
    for (int m = 0; m < s.G && status.ok(); ++m) {
      for (int g0 = 0; g0 < NKV && status.ok(); g0 += chunk) {
        const int n = std::min(chunk, NKV - g0);
        const int64_t h0 = static_cast<int64_t>(g0) * s.G + m;  // the first query head
        status = Scores(backend, dtype, s, qkv_b, m, g0, n, scores);
        if (status.ok()) {
          status = backend.SoftmaxRows(dtype, probs, stats + (b * int64_t{NH} + h0) * T,
                                       static_cast<int64_t>(s.G) * T, scores, n, T);
        }
        // O_h = P_h V_g: column-major O^T = op_N(V^T) op_N(P^T).
        if (status.ok()) {
          status = backend.Gemm(
              false, false, s.hs, T, T, 1.0f,
              At(qkv_b, C + static_cast<int64_t>(NKV) * s.hs + static_cast<int64_t>(g0) * s.hs,
                 dtype),
              s.rs, s.hs, probs, T, TT, 0.0f,
              At(out, static_cast<int64_t>(b) * T * C + h0 * s.hs, dtype), C,
              static_cast<int64_t>(s.G) * s.hs, n, dtype, dtype);
        }
      }
    }
  }
  backend.Release();
  return status;
}

Status AttentionBackwardByGemm(AttentionGemmBackend& backend, DType dtype, void* dqkv,
                               const void* dout, const void* qkv, const void* out,
                               const float* stats, int B, int T, int C, int NH, int NKV) {
  if (B == 0 || T == 0) return absl::OkStatus();
  const Shape s = MakeShape(B, T, C, NH, NKV);
  const int64_t TT = static_cast<int64_t>(T) * T;
  const BackwardScratch layout = BackwardLayout(dtype, s, backend.scratch_budget());
  const int chunk = layout.chunk;
  const size_t matrix32 = layout.matrix32, sums = layout.sums, matrix = layout.matrix;
  ASSIGN_OR_RETURN(void* scratch, backend.Scratch(layout.total()));
  char* base = static_cast<char*>(scratch);
  float* scores = reinterpret_cast<float*>(base);
  float* dprobs = reinterpret_cast<float*>(base + matrix32);
  float* dk = reinterpret_cast<float*>(base + 2 * matrix32);
  float* dv = reinterpret_cast<float*>(base + 2 * matrix32 + sums);
  void* probs = base + 2 * matrix32 + 2 * sums;
  void* dscores = base + 2 * matrix32 + 2 * sums + matrix;
  const int64_t group_stride = static_cast<int64_t>(s.G) * s.hs;  // query heads of one member
  Status status;
  for (int b = 0; b < B && status.ok(); ++b) {
    const void* qkv_b = At(qkv, static_cast<int64_t>(b) * T * s.rs, dtype);
    void* dqkv_b = At(dqkv, static_cast<int64_t>(b) * T * s.rs, dtype);
    const int64_t out_b = static_cast<int64_t>(b) * T * C;
    for (int m = 0; m < s.G && status.ok(); ++m) {
      for (int g0 = 0; g0 < NKV && status.ok(); g0 += chunk) {
        const int n = std::min(chunk, NKV - g0);
        const int64_t h0 = static_cast<int64_t>(g0) * s.G + m;
        const void* q = At(qkv_b, h0 * s.hs, dtype);
        const void* k = At(qkv_b, C + static_cast<int64_t>(g0) * s.hs, dtype);
        const void* v = At(
            qkv_b, C + static_cast<int64_t>(NKV) * s.hs + static_cast<int64_t>(g0) * s.hs, dtype);
        const void* dout_h = At(dout, out_b + h0 * s.hs, dtype);
        const void* out_h = At(out, out_b + h0 * s.hs, dtype);
        float* dk_g = dk + static_cast<int64_t>(g0) * T * s.hs;
        float* dv_g = dv + static_cast<int64_t>(g0) * T * s.hs;
        const float first = m == 0 ? 0.0f : 1.0f;  // the group's sums start at member 0
        status = Scores(backend, dtype, s, qkv_b, m, g0, n, scores);
        // dP_h = dO_h V_g^T: column-major dP^T = op_T(V^T) op_N(dO^T).
        if (status.ok()) {
          status = backend.Gemm(true, false, T, T, s.hs, 1.0f, v, s.rs, s.hs, dout_h, C,
                                group_stride, 0.0f, dprobs, T, TT, n, dtype, DType::kF32);
        }
        if (status.ok()) {
          status = backend.SoftmaxBackwardRows(
              dtype, probs, dscores, scores, dprobs, stats + (b * int64_t{NH} + h0) * T,
              static_cast<int64_t>(s.G) * T, dout_h, out_h, C, group_stride, s.hs, n, T);
        }
        // dV_g (+)= P_h^T dO_h: column-major dV^T = op_N(dO^T) op_T(P^T).
        if (status.ok()) {
          status = backend.Gemm(false, true, s.hs, T, T, 1.0f, dout_h, C, group_stride, probs, T,
                                TT, first, dv_g, s.hs, static_cast<int64_t>(T) * s.hs, n, dtype,
                                DType::kF32);
        }
        // dK_g (+)= scale dS_h^T Q_h: the same with Q and dS.
        if (status.ok()) {
          status = backend.Gemm(false, true, s.hs, T, T, s.scale, q, s.rs, group_stride, dscores, T,
                                TT, first, dk_g, s.hs, static_cast<int64_t>(T) * s.hs, n, dtype,
                                DType::kF32);
        }
        // dQ_h += scale dS_h K_g: column-major dQ^T += op_N(K^T) op_N(dS^T).
        if (status.ok()) {
          status =
              backend.Gemm(false, false, s.hs, T, T, s.scale, k, s.rs, s.hs, dscores, T, TT, 1.0f,
                           At(dqkv_b, h0 * s.hs, dtype), s.rs, group_stride, n, dtype, dtype);
        }
      }
    }
    if (status.ok()) {
      status = backend.AddFloatRows(dtype, At(dqkv_b, C, dtype), s.rs, s.hs, dk, NKV, T, s.hs);
    }
    if (status.ok()) {
      status = backend.AddFloatRows(dtype, At(dqkv_b, C + static_cast<int64_t>(NKV) * s.hs, dtype),
                                    s.rs, s.hs, dv, NKV, T, s.hs);
    }
  }
  backend.Release();
  return status;
}

}  // namespace strata
