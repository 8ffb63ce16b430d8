// CpuOps: checks sizes on the calling thread, then enqueues a closure that sets the OpenMP
// thread count on the stream's worker thread, casts the void* arguments to the compute dtype
// and runs the fast kernel. The closure captures everything by value (pointers, sizes,
// AdamParams), so the caller's arguments need not outlive the call; the buffers must.
// Thread-safety: see cpu_ops.h.
#include "kernels/cpu/cpu_ops.h"

#include <omp.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_adam.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/heads.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/op_checks.h"

namespace strata {
namespace {

template <typename T>
T* As(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* As(const void* p) {
  return static_cast<const T*>(p);
}

class CpuOps : public Ops {
 public:
  CpuOps(DType dtype, int threads, cpu::CpuAdam adam)
      : dtype_(dtype), threads_(threads > 0 ? threads : omp_get_num_procs()),
        adam_(std::make_shared<cpu::CpuAdam>(std::move(adam))) {}

  DType dtype() const override { return dtype_; }

  Status EncoderForward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                        const void* wpe, int B, int T, int C) override {
    RETURN_IF_ERROR(CheckNonNegative("EncoderForward", {{"B", B}, {"T", T}, {"C", C}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::EncoderForward(As<S>(out), tokens, As<S>(wte), As<S>(wpe), B, T, C);
    });
  }

  Status EncoderBackward(Stream& s, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                         int B, int T, int C) override {
    RETURN_IF_ERROR(CheckNonNegative("EncoderBackward", {{"B", B}, {"T", T}, {"C", C}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::EncoderBackward(As<S>(dwte), As<S>(dwpe), As<S>(dout), tokens, B, T, C);
    });
  }

  Status LayerNormForward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                          const void* weight, const void* bias, int N, int C) override {
    RETURN_IF_ERROR(CheckNonNegative("LayerNormForward", {{"N", N}, {"C", C}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::LayerNormForward(As<S>(out), mean, rstd, As<S>(inp), As<S>(weight), As<S>(bias), N, C);
    });
  }

  Status LayerNormBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                           const void* inp, const void* weight, const float* mean,
                           const float* rstd, int N, int C) override {
    RETURN_IF_ERROR(CheckNonNegative("LayerNormBackward", {{"N", N}, {"C", C}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::LayerNormBackward(As<S>(dinp), As<S>(dweight), As<S>(dbias), As<S>(dout), As<S>(inp),
                             As<S>(weight), mean, rstd, N, C);
    });
  }

  Status MatmulForward(Stream& s, void* out, const void* inp, const void* weight, const void* bias,
                       int N, int C, int OC) override {
    RETURN_IF_ERROR(CheckNonNegative("MatmulForward", {{"N", N}, {"C", C}, {"OC", OC}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::MatmulForward(As<S>(out), As<S>(inp), As<S>(weight), As<S>(bias), N, C, OC);
    });
  }

  Status MatmulBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                        const void* inp, const void* weight, int N, int C, int OC) override {
    // dweight may be null (a frozen weight): no weight gradient.
    RETURN_IF_ERROR(CheckNonNegative("MatmulBackward", {{"N", N}, {"C", C}, {"OC", OC}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::MatmulBackward(As<S>(dinp), As<S>(dweight), As<S>(dbias), As<S>(dout), As<S>(inp),
                          As<S>(weight), N, C, OC);
    });
  }

  Status AttentionForward(Stream& s, void* out, float* stats, const void* qkv, int B, int T, int C,
                          int NH, int NKV) override {
    RETURN_IF_ERROR(CheckHeadShape("AttentionForward", B, T, C, NH, NKV));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::AttentionForward(As<S>(out), stats, As<S>(qkv), B, T, C, NH, NKV);
    });
  }

  Status AttentionBackward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                           const void* out, const float* stats, int B, int T, int C, int NH,
                           int NKV) override {
    RETURN_IF_ERROR(CheckHeadShape("AttentionBackward", B, T, C, NH, NKV));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::AttentionBackward(As<S>(dqkv), As<S>(dout), As<S>(qkv), As<S>(out), stats, B, T, C, NH,
                             NKV);
    });
  }

  Status AttentionDecode(Stream& s, void* out, const void* qkv, int T, int C, int NH,
                         int NKV) override {
    RETURN_IF_ERROR(CheckHeadShape("AttentionDecode", 1, T, C, NH, NKV));
    if (T < 1) return absl::InvalidArgumentError("AttentionDecode: T must be >= 1");
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::AttentionDecode(As<S>(out), As<S>(qkv), T, C, NH, NKV);
    });
  }

  Status RmsNormForward(Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                        int N, int C, float eps) override {
    RETURN_IF_ERROR(CheckNonNegative("RmsNormForward", {{"N", N}, {"C", C}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::RmsNormForward(As<S>(out), rstd, As<S>(inp), As<S>(weight), N, C, eps);
    });
  }

  Status RmsNormBackward(Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                         const void* weight, const float* rstd, int N, int C) override {
    RETURN_IF_ERROR(CheckNonNegative("RmsNormBackward", {{"N", N}, {"C", C}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::RmsNormBackward(As<S>(dinp), As<S>(dweight), As<S>(dout), As<S>(inp), As<S>(weight),
                           rstd, N, C);
    });
  }

  Status RopeForward(Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs,
                     const RopeSpec& rope, int position0) override {
    RETURN_IF_ERROR(CheckRopeShape("RopeForward", B, T, NH, NKV, hs, rope, position0));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::Rope(As<S>(qkv), B, T, NH, NKV, hs, rope, position0, +1);
    });
  }

  Status RopeBackward(Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs,
                      const RopeSpec& rope, int position0) override {
    RETURN_IF_ERROR(CheckRopeShape("RopeBackward", B, T, NH, NKV, hs, rope, position0));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::Rope(As<S>(dqkv), B, T, NH, NKV, hs, rope, position0, -1);
    });
  }

  Status CopyHeads(Stream& s, void* qkv, void* rows, int N, int heads_per_row, int first, int count,
                   int hs, bool to_rows) override {
    RETURN_IF_ERROR(CheckHeadsShape("CopyHeads", N, heads_per_row, first, count, hs));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::CopyHeads(As<S>(qkv), As<S>(rows), N, heads_per_row, first, count, hs, to_rows);
    });
  }

  Status SwiGluForward(Stream& s, void* out, const void* inp, int N, int F) override {
    RETURN_IF_ERROR(CheckNonNegative("SwiGluForward", {{"N", N}, {"F", F}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::SwiGluForward(As<S>(out), As<S>(inp), N, F);
    });
  }

  Status SwiGluBackward(Stream& s, void* dinp, const void* inp, const void* dout, int N,
                        int F) override {
    RETURN_IF_ERROR(CheckNonNegative("SwiGluBackward", {{"N", N}, {"F", F}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::SwiGluBackward(As<S>(dinp), As<S>(inp), As<S>(dout), N, F);
    });
  }

  Status GeluForward(Stream& s, void* out, const void* inp, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::GeluForward(As<S>(out), As<S>(inp), n);
    });
  }

  Status GeluBackward(Stream& s, void* dinp, const void* inp, const void* dout, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::GeluBackward(As<S>(dinp), As<S>(inp), As<S>(dout), n);
    });
  }

  Status Add(Stream& s, void* out, const void* a, const void* b, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::Add(As<S>(out), As<S>(a), As<S>(b), n);
    });
  }

  Status Accumulate(Stream& s, void* dst, const void* src, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::Accumulate(As<S>(dst), As<S>(src), n);
    });
  }

  Status AddScaledColumns(Stream& s, void* dst, int dst_cols, int col, const void* src, int N,
                          int n, float alpha) override {
    constexpr const char* kOp = "AddScaledColumns";
    RETURN_IF_ERROR(CheckColumnSlice(kOp, "dst_cols", dst_cols, col, N, n));
    if (long{N} * n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::AddScaledColumns(As<S>(dst), dst_cols, col, As<S>(src), N, n, alpha);
    });
  }

  Status ScaledColumns(Stream& s, void* dst, const void* src, int src_cols, int col, int N, int n,
                       float alpha) override {
    constexpr const char* kOp = "ScaledColumns";
    RETURN_IF_ERROR(CheckColumnSlice(kOp, "src_cols", src_cols, col, N, n));
    if (long{N} * n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::ScaledColumns(As<S>(dst), As<S>(src), src_cols, col, N, n, alpha);
    });
  }

  Status Dropout(Stream& s, void* out, const void* in, int N, int C, int T, int64_t row0, float p,
                 uint64_t key, bool accumulate) override {
    constexpr const char* kOp = "Dropout";
    RETURN_IF_ERROR(CheckDropout(kOp, N, C, T, row0, p));
    if (long{N} * C > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"in", in}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::Dropout(As<S>(out), As<S>(in), N, C, T, row0, p, key, accumulate);
    });
  }

  Status SoftmaxCrossEntropy(Stream& s, float* losses, void* logits, const int32_t* targets, int N,
                             int V, int Vp, float dloss) override {
    RETURN_IF_ERROR(CheckCrossEntropyShape("SoftmaxCrossEntropy", N, V, Vp));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::SoftmaxCrossEntropy(losses, As<S>(logits), targets, N, V, Vp, dloss);
    });
  }

  Status AccumulateToFloat(Stream& s, float* dst, const void* src, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::AccumulateToFloat(dst, As<S>(src), n);
    });
  }

  Status CastFromFloat(Stream& s, void* dst, const float* src, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::CastFromFloat(As<S>(dst), src, n);
    });
  }

  Status CastToFloat(Stream& s, float* dst, const void* src, size_t n) override {
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::CastToFloat(dst, As<S>(src), n);
    });
  }

  Status SumSquares(Stream& s, float* result, const float* x, size_t n) override {
    RETURN_IF_ERROR(CheckNotNull("SumSquares", {{"result", result}}));
    return Launch(s, [=](auto) { cpu::SumSquares(result, x, n); });
  }

  Status DequantizeNf4(Stream& s, void* out, const uint8_t* codes, const uint8_t* absmax_codes,
                       const float* absmax2, const float* offset, size_t n) override {
    if (n > 0) {
      RETURN_IF_ERROR(CheckNotNull("DequantizeNf4", {{"out", out},
                                                     {"codes", codes},
                                                     {"absmax_codes", absmax_codes},
                                                     {"absmax2", absmax2},
                                                     {"offset", offset}}));
    }
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      if (n > 0) cpu::DequantizeNf4(As<S>(out), codes, absmax_codes, absmax2, *offset, n);
    });
  }

  Status DequantizeInt8(Stream& s, void* out, const int8_t* codes, const float* absmax,
                        size_t n) override {
    if (n > 0) {
      RETURN_IF_ERROR(
          CheckNotNull("DequantizeInt8", {{"out", out}, {"codes", codes}, {"absmax", absmax}}));
    }
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::DequantizeInt8(As<S>(out), codes, absmax, n);
    });
  }

  Status WidenBf16(Stream& s, void* out, const bf16* in, size_t n) override {
    if (n > 0) RETURN_IF_ERROR(CheckNotNull("WidenBf16", {{"out", out}, {"in", in}}));
    return Launch(s, [=](auto tag) {
      using S = decltype(tag);
      cpu::WidenBf16(As<S>(out), in, n);
    });
  }

  Status AdamW(Stream& s, void* param, float* master, const float* grad, float* m, float* v,
               size_t n, const AdamParams& hp) override {
    if (hp.step < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("AdamW: step=", hp.step, " (1-based, for bias correction)"));
    }
    // The SIMD CPU Adam (run-time dispatched, bit-identical to cpu::AdamWReference).
    std::shared_ptr<cpu::CpuAdam> adam = adam_;
    const DType dtype = dtype_;
    const int threads = threads_;
    s.EnqueueHost([=]() -> Status {
      omp_set_num_threads(threads);
      return adam->Step(dtype, param, master, grad, m, v, n, hp);
    });
    return absl::OkStatus();
  }

  Status AdamW8bit(Stream& s, void* param, float* master, const float* grad, uint8_t* m_codes,
                   float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                   const AdamParams& hp) override {
    if (hp.step < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("AdamW8bit: step=", hp.step, " (1-based, for bias correction)"));
    }
    if (n > 0) {
      RETURN_IF_ERROR(CheckNotNull("AdamW8bit", {{"master", master},
                                                 {"grad", grad},
                                                 {"m_codes", m_codes},
                                                 {"m_absmax", m_absmax},
                                                 {"v_codes", v_codes},
                                                 {"v_absmax", v_absmax}}));
    }
    // The same path as AdamW's CpuAdam (run-time dispatched, bit-identical to the reference).
    cpu::Adam8bitOptions options;
    options.path = adam_->path();
    options.threads = threads_;
    const DType dtype = dtype_;
    s.EnqueueHost([=]() -> Status {
      omp_set_num_threads(options.threads);
      return cpu::Adam8bitStep(options, dtype, param, master, grad, m_codes, m_absmax, v_codes,
                               v_absmax, n, hp);
    });
    return absl::OkStatus();
  }

 private:
  // Enqueues kernel(tag) with a value of the compute dtype as tag (float or bf16).
  template <typename Kernel>
  Status Launch(Stream& stream, Kernel kernel) const {
    const DType dtype = dtype_;
    const int threads = threads_;
    stream.EnqueueHost([dtype, threads, kernel]() -> Status {
      omp_set_num_threads(threads);  // per calling thread: the stream's worker
      if (dtype == DType::kF32) {
        kernel(float{});
      } else {
        kernel(bf16{});
      }
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  const DType dtype_;
  const int threads_;
  std::shared_ptr<cpu::CpuAdam> adam_;  // shared with enqueued work
};

}  // namespace

StatusOr<std::unique_ptr<Ops>> CreateCpuOps(DType dtype, int threads) {
  cpu::CpuAdamOptions adam_options;
  adam_options.threads = threads;
  ASSIGN_OR_RETURN(cpu::CpuAdam adam, cpu::CpuAdam::Create(adam_options));
  return std::unique_ptr<Ops>(new CpuOps(dtype, threads, std::move(adam)));
}

}  // namespace strata
