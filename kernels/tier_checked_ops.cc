// See tier_checked_ops.h.
#include "kernels/tier_checked_ops.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

class TierCheckedOps : public Ops {
 public:
  TierCheckedOps(std::unique_ptr<Ops> ops, const Device& device, Tier tier)
      : ops_(std::move(ops)), device_(device), tier_(tier) {}

  DType dtype() const override { return ops_->dtype(); }

  Status EncoderForward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                        const void* wpe, int B, int T, int C) override {
    RETURN_IF_ERROR(
        Check("EncoderForward", {{"out", out}, {"tokens", tokens}, {"wte", wte}, {"wpe", wpe}}));
    return ops_->EncoderForward(s, out, tokens, wte, wpe, B, T, C);
  }

  Status EncoderBackward(Stream& s, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                         int B, int T, int C) override {
    RETURN_IF_ERROR(Check("EncoderBackward",
                          {{"dwte", dwte}, {"dwpe", dwpe}, {"dout", dout}, {"tokens", tokens}}));
    return ops_->EncoderBackward(s, dwte, dwpe, dout, tokens, B, T, C);
  }

  Status LayerNormForward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                          const void* weight, const void* bias, int N, int C) override {
    RETURN_IF_ERROR(Check("LayerNormForward", {{"out", out},
                                               {"mean", mean},
                                               {"rstd", rstd},
                                               {"inp", inp},
                                               {"weight", weight},
                                               {"bias", bias}}));
    return ops_->LayerNormForward(s, out, mean, rstd, inp, weight, bias, N, C);
  }

  Status LayerNormBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                           const void* inp, const void* weight, const float* mean,
                           const float* rstd, int N, int C) override {
    RETURN_IF_ERROR(Check("LayerNormBackward", {{"dinp", dinp},
                                                {"dweight", dweight},
                                                {"dbias", dbias},
                                                {"dout", dout},
                                                {"inp", inp},
                                                {"weight", weight},
                                                {"mean", mean},
                                                {"rstd", rstd}}));
    return ops_->LayerNormBackward(s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }

  Status MatmulForward(Stream& s, void* out, const void* inp, const void* weight, const void* bias,
                       int N, int C, int OC) override {
    RETURN_IF_ERROR(
        Check("MatmulForward", {{"out", out}, {"inp", inp}, {"weight", weight}, {"bias", bias}}));
    return ops_->MatmulForward(s, out, inp, weight, bias, N, C, OC);
  }

  Status MatmulBackward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                        const void* inp, const void* weight, int N, int C, int OC) override {
    RETURN_IF_ERROR(Check("MatmulBackward", {{"dinp", dinp},
                                             {"dweight", dweight},
                                             {"dbias", dbias},
                                             {"dout", dout},
                                             {"inp", inp},
                                             {"weight", weight}}));
    return ops_->MatmulBackward(s, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }

  Status AttentionForward(Stream& s, void* out, float* stats, const void* qkv, int B, int T, int C,
                          int NH, int NKV) override {
    RETURN_IF_ERROR(Check("AttentionForward", {{"out", out}, {"stats", stats}, {"qkv", qkv}}));
    return ops_->AttentionForward(s, out, stats, qkv, B, T, C, NH, NKV);
  }

  Status AttentionBackward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                           const void* out, const float* stats, int B, int T, int C, int NH,
                           int NKV) override {
    RETURN_IF_ERROR(
        Check("AttentionBackward",
              {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"stats", stats}}));
    return ops_->AttentionBackward(s, dqkv, dout, qkv, out, stats, B, T, C, NH, NKV);
  }

  Status AttentionDecode(Stream& s, void* out, const void* qkv, int T, int C, int NH,
                         int NKV) override {
    RETURN_IF_ERROR(Check("AttentionDecode", {{"out", out}, {"qkv", qkv}}));
    return ops_->AttentionDecode(s, out, qkv, T, C, NH, NKV);
  }

  Status RmsNormForward(Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                        int N, int C, float eps) override {
    RETURN_IF_ERROR(Check("RmsNormForward",
                          {{"out", out}, {"rstd", rstd}, {"inp", inp}, {"weight", weight}}));
    return ops_->RmsNormForward(s, out, rstd, inp, weight, N, C, eps);
  }

  Status RmsNormBackward(Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                         const void* weight, const float* rstd, int N, int C) override {
    RETURN_IF_ERROR(Check("RmsNormBackward", {{"dinp", dinp},
                                              {"dweight", dweight},
                                              {"dout", dout},
                                              {"inp", inp},
                                              {"weight", weight},
                                              {"rstd", rstd}}));
    return ops_->RmsNormBackward(s, dinp, dweight, dout, inp, weight, rstd, N, C);
  }

  Status RopeForward(Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs,
                     const RopeSpec& rope, int position0) override {
    RETURN_IF_ERROR(Check("RopeForward", {{"qkv", qkv}}));
    return ops_->RopeForward(s, qkv, B, T, NH, NKV, hs, rope, position0);
  }

  Status RopeBackward(Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs,
                      const RopeSpec& rope, int position0) override {
    RETURN_IF_ERROR(Check("RopeBackward", {{"dqkv", dqkv}}));
    return ops_->RopeBackward(s, dqkv, B, T, NH, NKV, hs, rope, position0);
  }

  Status CopyHeads(Stream& s, void* qkv, void* rows, int N, int heads_per_row, int first, int count,
                   int hs, bool to_rows) override {
    RETURN_IF_ERROR(Check("CopyHeads", {{"qkv", qkv}, {"rows", rows}}));
    return ops_->CopyHeads(s, qkv, rows, N, heads_per_row, first, count, hs, to_rows);
  }

  Status SwiGluForward(Stream& s, void* out, const void* inp, int N, int F) override {
    RETURN_IF_ERROR(Check("SwiGluForward", {{"out", out}, {"inp", inp}}));
    return ops_->SwiGluForward(s, out, inp, N, F);
  }

  Status SwiGluBackward(Stream& s, void* dinp, const void* inp, const void* dout, int N,
                        int F) override {
    RETURN_IF_ERROR(Check("SwiGluBackward", {{"dinp", dinp}, {"inp", inp}, {"dout", dout}}));
    return ops_->SwiGluBackward(s, dinp, inp, dout, N, F);
  }

  Status GeluForward(Stream& s, void* out, const void* inp, size_t n) override {
    RETURN_IF_ERROR(Check("GeluForward", {{"out", out}, {"inp", inp}}));
    return ops_->GeluForward(s, out, inp, n);
  }

  Status GeluBackward(Stream& s, void* dinp, const void* inp, const void* dout, size_t n) override {
    RETURN_IF_ERROR(Check("GeluBackward", {{"dinp", dinp}, {"inp", inp}, {"dout", dout}}));
    return ops_->GeluBackward(s, dinp, inp, dout, n);
  }

  Status Add(Stream& s, void* out, const void* a, const void* b, size_t n) override {
    RETURN_IF_ERROR(Check("Add", {{"out", out}, {"a", a}, {"b", b}}));
    return ops_->Add(s, out, a, b, n);
  }

  Status Accumulate(Stream& s, void* dst, const void* src, size_t n) override {
    RETURN_IF_ERROR(Check("Accumulate", {{"dst", dst}, {"src", src}}));
    return ops_->Accumulate(s, dst, src, n);
  }

  Status AddScaledColumns(Stream& s, void* dst, int dst_cols, int col, const void* src, int N,
                          int n, float alpha) override {
    RETURN_IF_ERROR(Check("AddScaledColumns", {{"dst", dst}, {"src", src}}));
    return ops_->AddScaledColumns(s, dst, dst_cols, col, src, N, n, alpha);
  }

  Status ScaledColumns(Stream& s, void* dst, const void* src, int src_cols, int col, int N, int n,
                       float alpha) override {
    RETURN_IF_ERROR(Check("ScaledColumns", {{"dst", dst}, {"src", src}}));
    return ops_->ScaledColumns(s, dst, src, src_cols, col, N, n, alpha);
  }

  Status Dropout(Stream& s, void* out, const void* in, int N, int C, int T, int64_t row0, float p,
                 uint64_t key, bool accumulate) override {
    RETURN_IF_ERROR(Check("Dropout", {{"out", out}, {"in", in}}));
    return ops_->Dropout(s, out, in, N, C, T, row0, p, key, accumulate);
  }

  Status SoftmaxCrossEntropy(Stream& s, float* losses, void* logits, const int32_t* targets, int N,
                             int V, int Vp, float dloss) override {
    RETURN_IF_ERROR(Check("SoftmaxCrossEntropy",
                          {{"losses", losses}, {"logits", logits}, {"targets", targets}}));
    return ops_->SoftmaxCrossEntropy(s, losses, logits, targets, N, V, Vp, dloss);
  }

  Status AccumulateToFloat(Stream& s, float* dst, const void* src, size_t n) override {
    RETURN_IF_ERROR(Check("AccumulateToFloat", {{"dst", dst}, {"src", src}}));
    return ops_->AccumulateToFloat(s, dst, src, n);
  }

  Status CastFromFloat(Stream& s, void* dst, const float* src, size_t n) override {
    RETURN_IF_ERROR(Check("CastFromFloat", {{"dst", dst}, {"src", src}}));
    return ops_->CastFromFloat(s, dst, src, n);
  }

  Status CastToFloat(Stream& s, float* dst, const void* src, size_t n) override {
    RETURN_IF_ERROR(Check("CastToFloat", {{"dst", dst}, {"src", src}}));
    return ops_->CastToFloat(s, dst, src, n);
  }

  Status SumSquares(Stream& s, float* result, const float* x, size_t n) override {
    RETURN_IF_ERROR(Check("SumSquares", {{"result", result}, {"x", x}}));
    return ops_->SumSquares(s, result, x, n);
  }

  Status DequantizeNf4(Stream& s, void* out, const uint8_t* codes, const uint8_t* absmax_codes,
                       const float* absmax2, const float* offset, size_t n) override {
    RETURN_IF_ERROR(Check("DequantizeNf4", {{"out", out},
                                            {"codes", codes},
                                            {"absmax_codes", absmax_codes},
                                            {"absmax2", absmax2},
                                            {"offset", offset}}));
    return ops_->DequantizeNf4(s, out, codes, absmax_codes, absmax2, offset, n);
  }

  Status DequantizeInt8(Stream& s, void* out, const int8_t* codes, const float* absmax,
                        size_t n) override {
    RETURN_IF_ERROR(Check("DequantizeInt8", {{"out", out}, {"codes", codes}, {"absmax", absmax}}));
    return ops_->DequantizeInt8(s, out, codes, absmax, n);
  }

  Status WidenBf16(Stream& s, void* out, const bf16* in, size_t n) override {
    RETURN_IF_ERROR(Check("WidenBf16", {{"out", out}, {"in", in}}));
    return ops_->WidenBf16(s, out, in, n);
  }

  Status AdamW(Stream& s, void* param, float* master, const float* grad, float* m, float* v,
               size_t n, const AdamParams& hp) override {
    RETURN_IF_ERROR(
        Check("AdamW", {{"param", param}, {"master", master}, {"grad", grad}, {"m", m}, {"v", v}}));
    return ops_->AdamW(s, param, master, grad, m, v, n, hp);
  }

  Status AdamW8bit(Stream& s, void* param, float* master, const float* grad, uint8_t* m_codes,
                   float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                   const AdamParams& hp) override {
    RETURN_IF_ERROR(Check("AdamW8bit", {{"param", param},
                                        {"master", master},
                                        {"grad", grad},
                                        {"m_codes", m_codes},
                                        {"m_absmax", m_absmax},
                                        {"v_codes", v_codes},
                                        {"v_absmax", v_absmax}}));
    return ops_->AdamW8bit(s, param, master, grad, m_codes, m_absmax, v_codes, v_absmax, n, hp);
  }

 private:
  // Fails naming the op and every argument in the other tier.
  Status Check(const char* op,
               std::initializer_list<std::pair<const char*, const void*>> buffers) const {
    std::string problems;
    for (const auto& [name, pointer] : buffers) {
      if (pointer == nullptr) continue;
      const std::optional<Tier> tier = device_.TierOf(pointer);
      if (!tier.has_value() || *tier == tier_) continue;
      absl::StrAppend(&problems, problems.empty() ? "" : ", ", name, " is in the ", TierName(*tier),
                      " tier");
    }
    if (problems.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(op, " runs on the ", TierName(tier_), " tier, but ", problems));
  }

  std::unique_ptr<Ops> ops_;
  const Device& device_;
  const Tier tier_;
};

}  // namespace

std::unique_ptr<Ops> WithTierChecks(std::unique_ptr<Ops> ops, const Device& device, Tier tier) {
  return std::make_unique<TierCheckedOps>(std::move(ops), device, tier);
}

}  // namespace strata
