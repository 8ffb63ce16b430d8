// CudaOps: checks sizes and pointers on the calling thread, resolves the Stream to its
// cudaStream_t and GPU, then enqueues cuBLAS GEMMs or the kernels of cuda_kernels.h.
//
// GEMMs: cuBLAS is column-major and our matrices are row-major, so each row-major product is
// issued as its transpose (a row-major [R,K] matrix is a column-major [K,R] one):
//   forward   out[N,OC]  = inp[N,C] weight[OC,C]^T  ->  out^T = op_T(weight) op_N(inp^T)
//   dinp      dinp[N,C] += dout[N,OC] weight[OC,C]  ->  dinp^T += op_N(weight^T) op_N(dout^T)
//   dweight   dweight[OC,C] += dout^T inp           ->  dweight^T += op_N(inp^T) op_T(dout^T)
// every one with beta = 1: the backward ones accumulate (ops.h), and the forward one adds
// to `out` pre-filled with the broadcast bias, so product and bias are summed in fp32 and
// rounded once, as the CPU reference does. Compute type CUBLAS_COMPUTE_32F (no TF32).
// Thread-safety: see cuda_ops.h.
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <initializer_list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "device/cuda/cuda_native.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attention_gemm.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/op_checks.h"

namespace strata {
namespace {

// A cuBLAS result as Status: "<context>: <call> failed: <description> (<name>)".
Status CublasStatus(cublasStatus_t status, const char* call, const std::string& context) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(context, ": ", call, " failed: ", cublasGetStatusString(status), " (",
                   cublasGetStatusName(status), ")");
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

#define CUBLAS_RETURN_IF_ERROR(call, context) \
  RETURN_IF_ERROR(CublasStatus((call), #call, (context)))

class CudaOps : public Ops {
 public:
  CudaOps(DType dtype, CudaAttention attention) : dtype_(dtype), attention_(attention) {}

  ~CudaOps() override {
    for (const auto& [stream, entry] : handles_) {
      (void)stream;
      cudaSetDevice(entry.device);  // best effort: errors cannot be reported here
      cublasDestroy(entry.handle);
    }
  }

  DType dtype() const override { return dtype_; }

  Status EncoderForward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                        const void* wpe, int B, int T, int C) override {
    constexpr const char* kOp = "EncoderForward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"B", B}, {"T", T}, {"C", C}}));
    if (long{B} * T * C > 0) {  // wpe may be null: no position embedding
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"tokens", tokens}, {"wte", wte}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::EncoderForward(dtype_, out, tokens, wte, wpe, B, T, C, stream);
  }

  Status EncoderBackward(Stream& s, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                         int B, int T, int C) override {
    constexpr const char* kOp = "EncoderBackward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"B", B}, {"T", T}, {"C", C}}));
    if (long{B} * T * C > 0) {  // dwpe may be null: no position embedding
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"dwte", dwte}, {"dout", dout}, {"tokens", tokens}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::EncoderBackward(dtype_, dwte, dwpe, dout, tokens, B, T, C, stream);
  }

  Status LayerNormForward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                          const void* weight, const void* bias, int N, int C) override {
    constexpr const char* kOp = "LayerNormForward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"C", C}}));
    if (N > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"mean", mean}, {"rstd", rstd}}));
      if (C > 0) {
        RETURN_IF_ERROR(
            CheckNotNull(kOp, {{"out", out}, {"inp", inp}, {"weight", weight}, {"bias", bias}}));
      }
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::LayerNormForward(dtype_, out, mean, rstd, inp, weight, bias, N, C, stream);
  }

  Status LayerNormBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                           const void* inp, const void* weight, const float* mean,
                           const float* rstd, int N, int C) override {
    constexpr const char* kOp = "LayerNormBackward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"C", C}}));
    if (long{N} * C > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"dinp", dinp},
                                         {"dweight", dweight},
                                         {"dbias", dbias},
                                         {"dout", dout},
                                         {"inp", inp},
                                         {"weight", weight},
                                         {"mean", mean},
                                         {"rstd", rstd}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::LayerNormBackward(dtype_, dinp, dweight, dbias, dout, inp, weight, mean,
                                           rstd, N, C, stream);
  }

  Status MatmulForward(Stream& s, void* out, const void* inp, const void* weight, const void* bias,
                       int N, int C, int OC) override {
    constexpr const char* kOp = "MatmulForward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"C", C}, {"OC", OC}}));
    if (long{N} * OC > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}}));
      if (C > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"inp", inp}, {"weight", weight}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    RETURN_IF_ERROR(cuda_kernels::BroadcastBias(dtype_, out, bias, N, OC, stream));
    return GemmAccumulate(stream, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC,
                          "MatmulForward: out += inp * weight^T");
  }

  Status MatmulBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                        const void* inp, const void* weight, int N, int C, int OC) override {
    constexpr const char* kOp = "MatmulBackward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"C", C}, {"OC", OC}}));
    // Every output may be null (skipped); a null dweight (a frozen weight) also means no
    // inp is needed. Each GEMM needs its inputs.
    if (long{N} * C * OC > 0 && (dinp != nullptr || dweight != nullptr)) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"dout", dout}}));
      if (dinp != nullptr) RETURN_IF_ERROR(CheckNotNull(kOp, {{"weight", weight}}));
      if (dweight != nullptr) RETURN_IF_ERROR(CheckNotNull(kOp, {{"inp", inp}}));
    }
    if (long{N} * OC > 0 && dbias != nullptr) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"dout", dout}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    if (dinp != nullptr) {
      RETURN_IF_ERROR(GemmAccumulate(stream, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout,
                                     OC, dinp, C, "MatmulBackward: dinp += dout * weight"));
    }
    if (dweight != nullptr) {
      RETURN_IF_ERROR(GemmAccumulate(stream, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC,
                                     dweight, C, "MatmulBackward: dweight += dout^T * inp"));
    }
    if (dbias != nullptr) {
      RETURN_IF_ERROR(cuda_kernels::BiasBackward(dtype_, dbias, dout, N, OC, stream));
    }
    return absl::OkStatus();
  }

  Status AttentionForward(Stream& s, void* out, float* stats, const void* qkv, int B, int T, int C,
                          int NH, int NKV) override {
    constexpr const char* kOp = "AttentionForward";
    RETURN_IF_ERROR(CheckAttentionShape(kOp, B, T, C, NH, NKV));
    if (long{B} * T > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"stats", stats}}));
      if (C > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"qkv", qkv}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    if (GemmAttention(C)) {
      std::lock_guard<std::mutex> lock(mutex_);
      ASSIGN_OR_RETURN(cublasHandle_t handle, HandleLocked(stream));
      CublasAttention backend(handle, stream);
      return AttentionForwardByGemm(backend, dtype_, out, stats, qkv, B, T, C, NH, NKV);
    }
    return cuda_kernels::AttentionForward(dtype_, out, stats, qkv, B, T, C, NH, NKV, stream);
  }

  Status AttentionDecode(Stream& s, void* out, const void* qkv, int T, int C, int NH,
                         int NKV) override {
    constexpr const char* kOp = "AttentionDecode";
    RETURN_IF_ERROR(CheckAttentionShape(kOp, 1, T, C, NH, NKV));
    if (T < 1) return absl::InvalidArgumentError("AttentionDecode: T must be >= 1");
    RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"qkv", qkv}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::AttentionDecode(dtype_, out, qkv, T, C, NH, NKV, stream);
  }

  Status AttentionBackward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                           const void* out, const float* stats, int B, int T, int C, int NH,
                           int NKV) override {
    constexpr const char* kOp = "AttentionBackward";
    RETURN_IF_ERROR(CheckAttentionShape(kOp, B, T, C, NH, NKV));
    if (long{B} * T * C > 0) {
      RETURN_IF_ERROR(CheckNotNull(
          kOp, {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"stats", stats}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    if (GemmAttention(C)) {
      std::lock_guard<std::mutex> lock(mutex_);
      ASSIGN_OR_RETURN(cublasHandle_t handle, HandleLocked(stream));
      CublasAttention backend(handle, stream);
      return AttentionBackwardByGemm(backend, dtype_, dqkv, dout, qkv, out, stats, B, T, C, NH,
                                     NKV);
    }
    return cuda_kernels::AttentionBackward(dtype_, dqkv, dout, qkv, out, stats, B, T, C, NH, NKV,
                                           stream);
  }

  Status RmsNormForward(Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                        int N, int C, float eps) override {
    constexpr const char* kOp = "RmsNormForward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"C", C}}));
    if (N > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"rstd", rstd}}));
      if (C > 0) {
        RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"inp", inp}, {"weight", weight}}));
      }
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::RmsNormForward(dtype_, out, rstd, inp, weight, N, C, eps, stream);
  }

  Status RmsNormBackward(Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                         const void* weight, const float* rstd, int N, int C) override {
    constexpr const char* kOp = "RmsNormBackward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"C", C}}));
    if (long{N} * C > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"dinp", dinp},
                                         {"dweight", dweight},
                                         {"dout", dout},
                                         {"inp", inp},
                                         {"weight", weight},
                                         {"rstd", rstd}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::RmsNormBackward(dtype_, dinp, dweight, dout, inp, weight, rstd, N, C,
                                         stream);
  }

  Status RopeForward(Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs,
                     const RopeSpec& rope, int position0) override {
    constexpr const char* kOp = "RopeForward";
    RETURN_IF_ERROR(CheckRopeArguments(kOp, qkv, B, T, NH, NKV, hs, rope, position0));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::Rope(dtype_, qkv, B, T, NH, NKV, hs, rope, position0, +1, stream);
  }

  Status RopeBackward(Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs,
                      const RopeSpec& rope, int position0) override {
    constexpr const char* kOp = "RopeBackward";
    RETURN_IF_ERROR(CheckRopeArguments(kOp, dqkv, B, T, NH, NKV, hs, rope, position0));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::Rope(dtype_, dqkv, B, T, NH, NKV, hs, rope, position0, -1, stream);
  }

  Status CopyHeads(Stream& s, void* qkv, void* rows, int N, int heads_per_row, int first, int count,
                   int hs, bool to_rows) override {
    constexpr const char* kOp = "CopyHeads";
    RETURN_IF_ERROR(CheckHeadsShape(kOp, N, heads_per_row, first, count, hs));
    if (long{N} * count * hs > 0)
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"qkv", qkv}, {"rows", rows}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::CopyHeads(dtype_, qkv, rows, N, heads_per_row, first, count, hs, to_rows,
                                   stream);
  }

  Status SwiGluForward(Stream& s, void* out, const void* inp, int N, int F) override {
    constexpr const char* kOp = "SwiGluForward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"F", F}}));
    if (long{N} * F > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"inp", inp}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::SwiGluForward(dtype_, out, inp, N, F, stream);
  }

  Status SwiGluBackward(Stream& s, void* dinp, const void* inp, const void* dout, int N,
                        int F) override {
    constexpr const char* kOp = "SwiGluBackward";
    RETURN_IF_ERROR(CheckNonNegative(kOp, {{"N", N}, {"F", F}}));
    if (long{N} * F > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"dinp", dinp}, {"inp", inp}, {"dout", dout}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::SwiGluBackward(dtype_, dinp, inp, dout, N, F, stream);
  }

  Status GeluForward(Stream& s, void* out, const void* inp, size_t n) override {
    constexpr const char* kOp = "GeluForward";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"inp", inp}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::GeluForward(dtype_, out, inp, n, stream);
  }

  Status GeluBackward(Stream& s, void* dinp, const void* inp, const void* dout, size_t n) override {
    constexpr const char* kOp = "GeluBackward";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dinp", dinp}, {"inp", inp}, {"dout", dout}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::GeluBackward(dtype_, dinp, inp, dout, n, stream);
  }

  Status Add(Stream& s, void* out, const void* a, const void* b, size_t n) override {
    constexpr const char* kOp = "Add";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"a", a}, {"b", b}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::Add(dtype_, out, a, b, n, stream);
  }

  Status Accumulate(Stream& s, void* dst, const void* src, size_t n) override {
    constexpr const char* kOp = "Accumulate";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::Accumulate(dtype_, dst, src, n, stream);
  }

  Status AddScaledColumns(Stream& s, void* dst, int dst_cols, int col, const void* src, int N,
                          int n, float alpha) override {
    constexpr const char* kOp = "AddScaledColumns";
    RETURN_IF_ERROR(CheckColumnSlice(kOp, "dst_cols", dst_cols, col, N, n));
    if (long{N} * n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::AddScaledColumns(dtype_, dst, dst_cols, col, src, N, n, alpha, stream);
  }

  Status ScaledColumns(Stream& s, void* dst, const void* src, int src_cols, int col, int N, int n,
                       float alpha) override {
    constexpr const char* kOp = "ScaledColumns";
    RETURN_IF_ERROR(CheckColumnSlice(kOp, "src_cols", src_cols, col, N, n));
    if (long{N} * n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::ScaledColumns(dtype_, dst, src, src_cols, col, N, n, alpha, stream);
  }

  Status Dropout(Stream& s, void* out, const void* in, int N, int C, int T, int64_t row0, float p,
                 uint64_t key, bool accumulate) override {
    constexpr const char* kOp = "Dropout";
    RETURN_IF_ERROR(CheckDropout(kOp, N, C, T, row0, p));
    if (long{N} * C > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"in", in}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::Dropout(dtype_, out, in, N, C, T, row0, p, key, accumulate, stream);
  }

  Status SoftmaxCrossEntropy(Stream& s, float* losses, void* logits, const int32_t* targets, int N,
                             int V, int Vp, float dloss) override {
    constexpr const char* kOp = "SoftmaxCrossEntropy";
    RETURN_IF_ERROR(CheckCrossEntropyShape(kOp, N, V, Vp));
    if (N > 0) {
      RETURN_IF_ERROR(
          CheckNotNull(kOp, {{"losses", losses}, {"logits", logits}, {"targets", targets}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::SoftmaxCrossEntropy(dtype_, losses, logits, targets, N, V, Vp, dloss,
                                             stream);
  }

  Status AccumulateToFloat(Stream& s, float* dst, const void* src, size_t n) override {
    constexpr const char* kOp = "AccumulateToFloat";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::AccumulateToFloat(dtype_, dst, src, n, stream);
  }

  Status CastFromFloat(Stream& s, void* dst, const float* src, size_t n) override {
    constexpr const char* kOp = "CastFromFloat";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::CastFromFloat(dtype_, dst, src, n, stream);
  }

  Status CastToFloat(Stream& s, float* dst, const void* src, size_t n) override {
    constexpr const char* kOp = "CastToFloat";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::CastToFloat(dtype_, dst, src, n, stream);
  }

  Status SumSquares(Stream& s, float* result, const float* x, size_t n) override {
    constexpr const char* kOp = "SumSquares";
    RETURN_IF_ERROR(CheckNotNull(kOp, {{"result", result}}));
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"x", x}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::SumSquares(result, x, n, stream);
  }

  Status DequantizeNf4(Stream& s, void* out, const uint8_t* codes, const uint8_t* absmax_codes,
                       const float* absmax2, const float* offset, size_t n) override {
    constexpr const char* kOp = "DequantizeNf4";
    if (n > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out},
                                         {"codes", codes},
                                         {"absmax_codes", absmax_codes},
                                         {"absmax2", absmax2},
                                         {"offset", offset}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::DequantizeNf4(dtype_, out, codes, absmax_codes, absmax2, offset, n,
                                       stream);
  }

  Status DequantizeInt8(Stream& s, void* out, const int8_t* codes, const float* absmax,
                        size_t n) override {
    constexpr const char* kOp = "DequantizeInt8";
    if (n > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"codes", codes}, {"absmax", absmax}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::DequantizeInt8(dtype_, out, codes, absmax, n, stream);
  }

  Status WidenBf16(Stream& s, void* out, const bf16* in, size_t n) override {
    constexpr const char* kOp = "WidenBf16";
    if (n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"in", in}}));
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::WidenBf16(dtype_, out, in, n, stream);
  }

  Status AdamW(Stream& s, void* param, float* master, const float* grad, float* m, float* v,
               size_t n, const AdamParams& hp) override {
    constexpr const char* kOp = "AdamW";
    if (hp.step < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("AdamW: step=", hp.step, " (1-based, for bias correction)"));
    }
    if (n > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"master", master}, {"grad", grad}, {"m", m}, {"v", v}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::AdamW(dtype_, param, master, grad, m, v, n, hp, stream);
  }

  Status AdamW8bit(Stream& s, void* param, float* master, const float* grad, uint8_t* m_codes,
                   float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                   const AdamParams& hp) override {
    constexpr const char* kOp = "AdamW8bit";
    if (hp.step < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("AdamW8bit: step=", hp.step, " (1-based, for bias correction)"));
    }
    if (n > 0) {
      RETURN_IF_ERROR(CheckNotNull(kOp, {{"master", master},
                                         {"grad", grad},
                                         {"m_codes", m_codes},
                                         {"m_absmax", m_absmax},
                                         {"v_codes", v_codes},
                                         {"v_absmax", v_absmax}}));
    }
    ASSIGN_OR_RETURN(cudaStream_t stream, Prepare(s, kOp));
    return cuda_kernels::AdamW8bit(dtype_, param, master, grad, m_codes, m_absmax, v_codes,
                                   v_absmax, n, hp, stream);
  }

 private:
  struct HandleEntry {
    cublasHandle_t handle;
    int device;  // the GPU the handle was created on
  };

  // The shared head-shape checks, then the flash kernels' limit on the head size (the GEMM
  // attention has none).
  Status CheckAttentionShape(const char* op, int B, int T, int C, int NH, int NKV) const {
    RETURN_IF_ERROR(CheckHeadShape(op, B, T, C, NH, NKV));
    if (!GemmAttention(C) && C / NH > cuda_kernels::kMaxAttentionHeadSize) {
      return absl::UnimplementedError(absl::StrCat(
          op, ": head size C/NH=", C / NH, " is over ", cuda_kernels::kMaxAttentionHeadSize,
          ", the most the CUDA flash attention kernels support (device.cuda_attention=gemm "
          "has no limit)"));
    }
    return absl::OkStatus();
  }

  // The shared RoPE shape checks, the CUDA kernel's limit on the head size, and the buffer.
  static Status CheckRopeArguments(const char* op, const void* qkv, int B, int T, int NH, int NKV,
                                   int hs, const RopeSpec& rope, int position0) {
    RETURN_IF_ERROR(CheckRopeShape(op, B, T, NH, NKV, hs, rope, position0));
    if (hs > cuda_kernels::kMaxRopeHeadSize) {
      return absl::UnimplementedError(absl::StrCat(op, ": head size hs=", hs, " is over ",
                                                   cuda_kernels::kMaxRopeHeadSize,
                                                   ", the most the CUDA RoPE kernel supports"));
    }
    if (long{B} * T * hs > 0) RETURN_IF_ERROR(CheckNotNull(op, {{"qkv", qkv}}));
    return absl::OkStatus();
  }

  // The cudaStream_t of `s`, with its GPU made current on the calling thread (kernels
  // launch on the current GPU, and the caller's thread may have another one current).
  StatusOr<cudaStream_t> Prepare(Stream& s, const char* op) {
    StatusOr<cudaStream_t> native = NativeStream(s);
    if (!native.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", native.status().message()));
    }
    const cudaStream_t stream = *native;
    int device = 0, current = 0;
    CUDA_RETURN_IF_ERROR(cudaStreamGetDevice(stream, &device),
                         absl::StrCat(op, ": finding the GPU of stream '", s.name(), "'"));
    CUDA_RETURN_IF_ERROR(cudaGetDevice(&current), absl::StrCat(op, ": reading the current GPU"));
    if (current != device) {
      CUDA_RETURN_IF_ERROR(cudaSetDevice(device), absl::StrCat(op, ": selecting GPU ", device,
                                                               " of stream '", s.name(), "'"));
    }
    return stream;
  }

  // The cuBLAS handle bound to `stream` (whose GPU is current), created on first use.
  // One handle per stream: cuBLAS's default workspace then serves only that stream, so
  // GEMMs on concurrent streams never share scratch memory. Requires mutex_.
  StatusOr<cublasHandle_t> HandleLocked(cudaStream_t stream) {
    int device = 0;
    CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "reading the current GPU for cuBLAS");
    auto it = handles_.find(stream);
    if (it != handles_.end()) {
      if (it->second.device == device) return it->second.handle;
      // A destroyed stream's address reused by a stream of another GPU: start afresh.
      cublasDestroy(it->second.handle);
      handles_.erase(it);
    }
    cublasHandle_t handle = nullptr;
    CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle),
                           absl::StrCat("creating a cuBLAS handle on GPU ", device));
    const Status bound = CublasStatus(cublasSetStream(handle, stream), "cublasSetStream",
                                      "binding a cuBLAS handle to its stream");
    if (!bound.ok()) {
      cublasDestroy(handle);
      return bound;
    }
    handles_.emplace(stream, HandleEntry{handle, device});
    return handle;
  }

  // Column-major C[m,n] += op(A)[m,k] op(B)[k,n] in the compute dtype with fp32 accumulation
  // (alpha = beta = 1), enqueued on `stream`. Nothing to do when any size is 0.
  Status GemmAccumulate(cudaStream_t stream, cublasOperation_t transa, cublasOperation_t transb,
                        int m, int n, int k, const void* a, int lda, const void* b, int ldb,
                        void* c, int ldc, const char* what) {
    if (m == 0 || n == 0 || k == 0) return absl::OkStatus();
    const cudaDataType type = dtype_ == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    const float alpha = 1.0f, beta = 1.0f;
    std::lock_guard<std::mutex> lock(mutex_);
    ASSIGN_OR_RETURN(cublasHandle_t handle, HandleLocked(stream));
    CUBLAS_RETURN_IF_ERROR(
        cublasGemmEx(handle, transa, transb, m, n, k, &alpha, a, type, lda, b, type, ldb, &beta, c,
                     type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        absl::StrCat(what, " (m=", m, ", n=", n, ", k=", k, ", ", DTypeName(dtype_), ")"));
    return absl::OkStatus();
  }

  // The GEMM attention on one stream: cuBLAS through this stream's handle, the row kernels
  // of cuda_kernels.h, stream-ordered scratch. Used under mutex_ (the handle).
  class CublasAttention : public AttentionGemmBackend {
   public:
    CublasAttention(cublasHandle_t handle, cudaStream_t stream)
        : handle_(handle), stream_(stream) {}
    ~CublasAttention() override { Release(); }

    Status Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda,
                int64_t sa, const void* b, int ldb, int64_t sb, float beta, void* c, int ldc,
                int64_t sc, int batch, DType ab, DType c_type) override {
      if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
      auto type = [](DType t) { return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; };
      CUBLAS_RETURN_IF_ERROR(
          cublasGemmStridedBatchedEx(handle_, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, a, type(ab),
                                     lda, sa, b, type(ab), ldb, sb, &beta, c, type(c_type), ldc, sc,
                                     batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          absl::StrCat("attention GEMM (m=", m, ", n=", n, ", k=", k, ", batch=", batch, ", ",
                       DTypeName(ab), " -> ", DTypeName(c_type), ")"));
      return absl::OkStatus();
    }
    Status SoftmaxRows(DType dtype, void* p, float* stats, int64_t stats_stride,
                       const float* scores, int heads, int T) override {
      return cuda_kernels::AttentionSoftmaxRows(dtype, p, stats, stats_stride, scores, heads, T,
                                                stream_);
    }
    Status SoftmaxBackwardRows(DType dtype, void* p, void* ds, const float* scores, const float* dp,
                               const float* stats, int64_t stats_stride, const void* dout,
                               const void* out, int64_t row_stride, int64_t head_stride, int hs,
                               int heads, int T) override {
      return cuda_kernels::AttentionSoftmaxBackwardRows(dtype, p, ds, scores, dp, stats,
                                                        stats_stride, dout, out, row_stride,
                                                        head_stride, hs, heads, T, stream_);
    }
    Status AddFloatRows(DType dtype, void* dst, int64_t row_stride, int64_t head_stride,
                        const float* src, int heads, int T, int hs) override {
      return cuda_kernels::AttentionAddFloatRows(dtype, dst, row_stride, head_stride, src, heads, T,
                                                 hs, stream_);
    }
    StatusOr<void*> Scratch(size_t bytes) override {
      Release();
      CUDA_RETURN_IF_ERROR(cudaMallocAsync(&scratch_, std::max<size_t>(bytes, 1), stream_),
                           absl::StrCat("allocating ", FormatBytes(bytes),
                                        " of attention scores (device.cuda_attention=flash "
                                        "needs none)"));
      return scratch_;
    }
    void Release() override {
      if (scratch_ != nullptr) cudaFreeAsync(scratch_, stream_);
      scratch_ = nullptr;
    }

   private:
    cublasHandle_t handle_;
    cudaStream_t stream_;
    void* scratch_ = nullptr;
  };

  // True where the GEMM attention runs: chosen, and the head size is not 0.
  bool GemmAttention(int C) const { return attention_ == CudaAttention::kGemm && C > 0; }

  const DType dtype_;
  const CudaAttention attention_;
  std::mutex mutex_;  // guards handles_ and the use of each handle
  std::unordered_map<cudaStream_t, HandleEntry> handles_;
};

}  // namespace

StatusOr<std::unique_ptr<Ops>> CreateCudaOps(DType dtype, CudaAttention attention) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError("CreateCudaOps: compute dtype must be fp32 or bf16");
  }
  return std::unique_ptr<Ops>(new CudaOps(dtype, attention));
}

}  // namespace strata
