// GPT model: its units and initialisation, and what it does in each stage the decoder
// skeleton (models/common/decoder.h) runs: the token and position embedding, the block
// (layernorm, fused qkv with biases, attention, GELU MLP), the final layernorm; and its
// decode step. The backward mirrors the forward; `dres_` carries the gradient of the
// residual stream between stages.
#include "models/gpt/gpt.h"

#include <algorithm>
#include <cmath>

#include "models/common/decoder.h"

namespace strata {
namespace {

// Tensor indices inside a block unit, in layout order.
enum BlockTensor { kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB, kLn2W, kLn2B, kFcW, kFcB,
                   kFcProjW, kFcProjB };
enum EmbedTensor { kWte, kWpe };
enum FinalTensor { kLnfW, kLnfB };

struct BlockActivations {
  Buffer ln1, ln1_mean, ln1_rstd, qkv, atty, att_stats, residual2, ln2, ln2_mean, ln2_rstd,
      fch, fch_gelu, residual3;
};

enum LoraTarget { kLoraQkv, kLoraAttProj, kLoraFc, kLoraFcProj };
constexpr char kGptLoraDefault[] = "attn.qkv";

class Gpt : public DecoderBase {
 public:
  Gpt(const GptConfig& config, DType dtype, std::vector<int> lora_targets)
      : DecoderBase(dtype, config.vocab, config.padded_vocab, config.channels, config.layers,
                    config.recompute),
        config_(config) {
    const int C = config.channels, L = config.layers;
    const float std_residual = 0.02f / std::sqrt(2.0f * L);
    UnitLayout embed("embedding");
    embed.MarkVocabRows(
        embed.Add("wte", {config.padded_vocab, C}, true, InitKind::kNormal, 0.02f));
    embed.Add("wpe", {config.max_seq_len, C}, true, InitKind::kNormal, 0.01f);
    units_.push_back(embed);
    for (int l = 0; l < L; ++l) {
      UnitLayout block("block " + std::to_string(l));
      block.Add("ln1.weight", {C}, false, InitKind::kOnes);
      block.Add("ln1.bias", {C}, false, InitKind::kZeros);
      block.MarkLinear(block.Add("attn.qkv.weight", {3 * C, C}, true, InitKind::kNormal, 0.02f));
      block.Add("attn.qkv.bias", {3 * C}, false, InitKind::kZeros);
      block.MarkLinear(block.Add("attn.proj.weight", {C, C}, true, InitKind::kNormal, std_residual));
      block.Add("attn.proj.bias", {C}, false, InitKind::kZeros);
      block.Add("ln2.weight", {C}, false, InitKind::kOnes);
      block.Add("ln2.bias", {C}, false, InitKind::kZeros);
      block.MarkLinear(block.Add("mlp.fc.weight", {4 * C, C}, true, InitKind::kNormal, 0.02f));
      block.Add("mlp.fc.bias", {4 * C}, false, InitKind::kZeros);
      block.MarkLinear(block.Add("mlp.proj.weight", {C, 4 * C}, true, InitKind::kNormal, std_residual));
      block.Add("mlp.proj.bias", {C}, false, InitKind::kZeros);
      units_.push_back(block);
    }
    UnitLayout final_norm("final norm");
    final_norm.Add("lnf.weight", {C}, false, InitKind::kOnes);
    final_norm.Add("lnf.bias", {C}, false, InitKind::kZeros);
    units_.push_back(final_norm);

    if (config.lora.enabled()) {
      lora_ = LoraAdapters(config.lora, GptLoraTargets(config), std::move(lora_targets), L,
                           dtype, &units_);
    }

    head_unit_ = 0;  // the LM head is the token embedding
    head_tensor_ = kWte;
    BuildStages();
  }

  Status PrepareActivations(Device& device, int batch, int seq_len) override {
    batch_ = batch;
    seq_len_ = seq_len;
    const size_t N = static_cast<size_t>(batch) * seq_len, C = config_.channels;
    const size_t NH = config_.heads, V = config_.padded_vocab;
    auto act = [&](size_t elements, DType type, const std::string& what) {
      return Activation(device, elements, type, what);
    };
    blocks_.clear();
    blocks_.resize(config_.layers);
    ASSIGN_OR_RETURN(encoded_, act(N * C, dtype_, "encoded"));
    // Recompute: each block keeps its output only; one scratch set holds the inside of the
    // block being run.
    for (int l = 0; l < config_.layers; ++l) {
      ASSIGN_OR_RETURN(blocks_[l].residual3, act(N * C, dtype_, "residual3"));
    }
    for (int l = 0; l < (config_.recompute ? 1 : config_.layers); ++l) {
      BlockActivations& a = config_.recompute ? scratch_ : blocks_[l];
      ASSIGN_OR_RETURN(a.ln1, act(N * C, dtype_, "ln1"));
      ASSIGN_OR_RETURN(a.ln1_mean, act(N, DType::kF32, "ln1 mean"));
      ASSIGN_OR_RETURN(a.ln1_rstd, act(N, DType::kF32, "ln1 rstd"));
      ASSIGN_OR_RETURN(a.qkv, act(N * 3 * C, dtype_, "qkv"));
      ASSIGN_OR_RETURN(a.atty, act(N * C, dtype_, "attention out"));
      ASSIGN_OR_RETURN(a.att_stats, act(N * NH, DType::kF32, "attention stats"));
      ASSIGN_OR_RETURN(a.residual2, act(N * C, dtype_, "residual2"));
      ASSIGN_OR_RETURN(a.ln2, act(N * C, dtype_, "ln2"));
      ASSIGN_OR_RETURN(a.ln2_mean, act(N, DType::kF32, "ln2 mean"));
      ASSIGN_OR_RETURN(a.ln2_rstd, act(N, DType::kF32, "ln2 rstd"));
      ASSIGN_OR_RETURN(a.fch, act(N * 4 * C, dtype_, "fc"));
      ASSIGN_OR_RETURN(a.fch_gelu, act(N * 4 * C, dtype_, "gelu"));
    }
    ASSIGN_OR_RETURN(lnf_, act(N * C, dtype_, "lnf"));
    ASSIGN_OR_RETURN(lnf_mean_, act(N, DType::kF32, "lnf mean"));
    ASSIGN_OR_RETURN(lnf_rstd_, act(N, DType::kF32, "lnf rstd"));
    ASSIGN_OR_RETURN(logits_, act(N * V, dtype_, "logits"));
    ASSIGN_OR_RETURN(losses_, act(N, DType::kF32, "losses"));
    // Gradient scratch, reused by every block.
    ASSIGN_OR_RETURN(dres_, act(N * C, dtype_, "d residual"));
    ASSIGN_OR_RETURN(dbtc_, act(N * C, dtype_, "d scratch [B,T,C]"));
    ASSIGN_OR_RETURN(dqkv_, act(N * 3 * C, dtype_, "d qkv"));
    ASSIGN_OR_RETURN(dfch_gelu_, act(N * 4 * C, dtype_, "d gelu"));
    ASSIGN_OR_RETURN(dfch_, act(N * 4 * C, dtype_, "d fc"));
    if (lora_.active()) {
      ASSIGN_OR_RETURN(norm_sink_, act(2 * C, dtype_, "frozen norms' gradient sink"));
    }
    return lora_.Prepare(device, static_cast<int>(N), config_.layers);
  }

  Status EmbedForward(const StepContext& ctx) override {
    const void* p = ctx.params[0];
    return ctx.ops->EncoderForward(*ctx.stream, encoded_.data(), ctx.inputs, At(p, 0, kWte),
                                   At(p, 0, kWpe), ctx.batch, ctx.seq_len, config_.channels);
  }

  Status FinalNormForward(const StepContext& ctx) override {
    const int stage = config_.layers + 1, N = ctx.batch * ctx.seq_len;
    const void* p = ctx.params[stage];
    return ctx.ops->LayerNormForward(*ctx.stream, lnf_.data(), lnf_mean_.as<float>(),
                                     lnf_rstd_.as<float>(), ResidualInput(config_.layers),
                                     At(p, stage, kLnfW), At(p, stage, kLnfB), N,
                                     config_.channels);
  }

  Status FinalNormBackward(const StepContext& ctx) override {
    const int stage = config_.layers + 1, N = ctx.batch * ctx.seq_len;
    const void* p = ctx.params[stage];
    void* g = ctx.grads[stage];
    return ctx.ops->LayerNormBackward(*ctx.stream, dres_.data(), NormGrad(g, stage, kLnfW),
                                      NormGrad(g, stage, kLnfB), dbtc_.data(),
                                      ResidualInput(config_.layers), At(p, stage, kLnfW),
                                      lnf_mean_.as<float>(), lnf_rstd_.as<float>(), N,
                                      config_.channels);
  }

  Status EmbedBackward(const StepContext& ctx) override {
    void* g = ctx.grads[0];
    if (g == nullptr) return absl::OkStatus();  // a frozen embedding has nothing to add to
    return ctx.ops->EncoderBackward(*ctx.stream, At(g, 0, kWte), At(g, 0, kWpe), dres_.data(),
                                    ctx.inputs, ctx.batch, ctx.seq_len, config_.channels);
  }

  Status BlockBackward(int stage, const StepContext& ctx) override {
    Ops& ops = *ctx.ops;
    Device& device = *ctx.device;
    Stream& s = *ctx.stream;
    const int B = ctx.batch, T = ctx.seq_len, C = config_.channels, NH = config_.heads;
    const int N = B * T;
    const size_t btc_bytes = static_cast<size_t>(N) * C * DTypeBytes(dtype_);
    const int l = stage - 1;
    const void* p = ctx.params[stage];
    void* g = ctx.grads[stage];
    BlockActivations& a = Acts(l);
    const size_t n4 = static_cast<size_t>(N) * 4 * C;
    // residual3 = residual2 + proj(gelu(fc(ln2(residual2)))): dres flows to both.
    RETURN_IF_ERROR(device.MemsetAsync(dfch_gelu_.data(), 0, n4 * DTypeBytes(dtype_), s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dfch_gelu_.data(), Grad(g, stage, kFcProjW),
                                       Grad(g, stage, kFcProjB), dres_.data(),
                                       a.fch_gelu.data(), At(p, stage, kFcProjW), N, 4 * C,
                                       C));
    RETURN_IF_ERROR(lora_.Backward(ctx, l, kLoraFcProj, a.fch_gelu.data(), dres_.data(),
                                   dfch_gelu_.data(), N));
    RETURN_IF_ERROR(device.MemsetAsync(dfch_.data(), 0, n4 * DTypeBytes(dtype_), s));
    RETURN_IF_ERROR(ops.GeluBackward(s, dfch_.data(), a.fch.data(), dfch_gelu_.data(), n4));
    RETURN_IF_ERROR(device.MemsetAsync(dbtc_.data(), 0, btc_bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dbtc_.data(), Grad(g, stage, kFcW),
                                       Grad(g, stage, kFcB), dfch_.data(), a.ln2.data(),
                                       At(p, stage, kFcW), N, C, 4 * C));
    RETURN_IF_ERROR(
        lora_.Backward(ctx, l, kLoraFc, a.ln2.data(), dfch_.data(), dbtc_.data(), N));
    RETURN_IF_ERROR(ops.LayerNormBackward(s, dres_.data(), NormGrad(g, stage, kLn2W),
                                          NormGrad(g, stage, kLn2B), dbtc_.data(),
                                          a.residual2.data(), At(p, stage, kLn2W),
                                          a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(), N,
                                          C));
    // residual2 = residual + proj(attention(qkv(ln1(residual)))).
    RETURN_IF_ERROR(device.MemsetAsync(dbtc_.data(), 0, btc_bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dbtc_.data(), Grad(g, stage, kAttProjW),
                                       Grad(g, stage, kAttProjB), dres_.data(), a.atty.data(),
                                       At(p, stage, kAttProjW), N, C, C));
    RETURN_IF_ERROR(lora_.Backward(ctx, l, kLoraAttProj, a.atty.data(), dres_.data(),
                                   dbtc_.data(), N));
    RETURN_IF_ERROR(device.MemsetAsync(dqkv_.data(), 0, 3 * btc_bytes, s));
    RETURN_IF_ERROR(ops.AttentionBackward(s, dqkv_.data(), dbtc_.data(), a.qkv.data(),
                                          a.atty.data(), a.att_stats.as<float>(), B, T, C,
                                          NH, NH));
    RETURN_IF_ERROR(device.MemsetAsync(dbtc_.data(), 0, btc_bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dbtc_.data(), Grad(g, stage, kQkvW),
                                       Grad(g, stage, kQkvB), dqkv_.data(), a.ln1.data(),
                                       At(p, stage, kQkvW), N, C, 3 * C));
    RETURN_IF_ERROR(
        lora_.Backward(ctx, l, kLoraQkv, a.ln1.data(), dqkv_.data(), dbtc_.data(), N));
    return ops.LayerNormBackward(s, dres_.data(), NormGrad(g, stage, kLn1W),
                                 NormGrad(g, stage, kLn1B),
                                 dbtc_.data(), ResidualInput(l), At(p, stage, kLn1W),
                                 a.ln1_mean.as<float>(), a.ln1_rstd.as<float>(), N, C);
  }

  Status PrepareDecode(Device& device, int max_len, int max_rows) override {
    const size_t C = config_.channels, R = static_cast<size_t>(max_rows);
    decode_len_ = max_len;
    decode_rows_ = max_rows;
    auto act = [&](size_t elements, DType type, const std::string& what) {
      return Activation(device, elements, type, what);
    };
    decode_cache_.clear();
    for (int l = 0; l < config_.layers; ++l) {
      ASSIGN_OR_RETURN(Buffer cache, act(static_cast<size_t>(max_len) * 3 * C, dtype_, "kv cache"));
      decode_cache_.push_back(std::move(cache));
    }
    ASSIGN_OR_RETURN(dec_x_, act(R * C, dtype_, "decode residual"));
    ASSIGN_OR_RETURN(dec_ln_, act(R * C, dtype_, "decode norm"));
    ASSIGN_OR_RETURN(dec_stats_, act(2 * R, DType::kF32, "decode norm stats"));
    ASSIGN_OR_RETURN(dec_att_, act(R * C, dtype_, "decode attention"));
    ASSIGN_OR_RETURN(dec_att_stats_, act(R * config_.heads, DType::kF32, "decode attention stats"));
    ASSIGN_OR_RETURN(dec_tmp_, act(R * C, dtype_, "decode projection"));
    ASSIGN_OR_RETURN(dec_fc_, act(R * 4 * C, dtype_, "decode fc"));
    ASSIGN_OR_RETURN(dec_gelu_, act(R * 4 * C, dtype_, "decode gelu"));
    ASSIGN_OR_RETURN(logits_, act(config_.padded_vocab, dtype_, "decode logits"));
    return lora_.PrepareDecode(device, max_rows);
  }

  Status DecodeStep(const StepContext& ctx, int position, int rows) override {
    if (rows < 1 || rows > decode_rows_ || position < 0 || position + rows > decode_len_ ||
        position + rows > config_.max_seq_len) {
      return absl::OutOfRangeError(absl::StrFormat(
          "decode of %d rows (at most %d) at position %d outside the cache (%d) or the position "
          "embedding (%d)",
          rows, decode_rows_, position, decode_len_, config_.max_seq_len));
    }
    Ops& ops = *ctx.ops;
    Stream& s = *ctx.stream;
    const int C = config_.channels, NH = config_.heads, L = config_.layers;
    const size_t bytes = DTypeBytes(dtype_);
    float* mean = dec_stats_.as<float>();
    float* rstd = mean + rows;
    const void* p0 = ctx.params[0];
    const char* wpe_rows =
        static_cast<const char*>(At(p0, 0, kWpe)) + static_cast<size_t>(position) * C * bytes;
    RETURN_IF_ERROR(ops.EncoderForward(s, dec_x_.data(), ctx.inputs, At(p0, 0, kWte), wpe_rows,
                                       1, rows, C));
    const size_t n = static_cast<size_t>(rows) * C;
    for (int l = 0; l < L; ++l) {
      const int u = l + 1;
      const void* p = ctx.params[u];
      char* cache = static_cast<char*>(decode_cache_[l].data());
      void* qkv_rows = cache + static_cast<size_t>(position) * 3 * C * bytes;
      RETURN_IF_ERROR(ops.LayerNormForward(s, dec_ln_.data(), mean, rstd, dec_x_.data(),
                                           At(p, u, kLn1W), At(p, u, kLn1B), rows, C));
      RETURN_IF_ERROR(ops.MatmulForward(s, qkv_rows, dec_ln_.data(), At(p, u, kQkvW),
                                        At(p, u, kQkvB), rows, C, 3 * C));
      RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraQkv, dec_ln_.data(), qkv_rows, rows, true));
      // Each row over the cache up to its own position (its keys are in by now): from
      // position 0, the causal attention of all rows in one call (the training kernel over
      // the cache's first rows); after it, row by row.
      if (position == 0 && rows > 1) {
        RETURN_IF_ERROR(ops.AttentionForward(s, dec_att_.data(), dec_att_stats_.as<float>(),
                                             cache, 1, rows, C, NH, NH));
      } else {
        for (int r = 0; r < rows; ++r) {
          RETURN_IF_ERROR(ops.AttentionDecode(
              s, static_cast<char*>(dec_att_.data()) + static_cast<size_t>(r) * C * bytes, cache,
              position + r + 1, C, NH, NH));
        }
      }
      RETURN_IF_ERROR(ops.MatmulForward(s, dec_tmp_.data(), dec_att_.data(), At(p, u, kAttProjW),
                                        At(p, u, kAttProjB), rows, C, C));
      RETURN_IF_ERROR(
          lora_.Forward(ctx, l, kLoraAttProj, dec_att_.data(), dec_tmp_.data(), rows, true));
      RETURN_IF_ERROR(ops.Add(s, dec_x_.data(), dec_x_.data(), dec_tmp_.data(), n));
      RETURN_IF_ERROR(ops.LayerNormForward(s, dec_ln_.data(), mean, rstd, dec_x_.data(),
                                           At(p, u, kLn2W), At(p, u, kLn2B), rows, C));
      RETURN_IF_ERROR(ops.MatmulForward(s, dec_fc_.data(), dec_ln_.data(), At(p, u, kFcW),
                                        At(p, u, kFcB), rows, C, 4 * C));
      RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraFc, dec_ln_.data(), dec_fc_.data(), rows, true));
      RETURN_IF_ERROR(ops.GeluForward(s, dec_gelu_.data(), dec_fc_.data(), 4 * n));
      RETURN_IF_ERROR(ops.MatmulForward(s, dec_tmp_.data(), dec_gelu_.data(), At(p, u, kFcProjW),
                                        At(p, u, kFcProjB), rows, 4 * C, C));
      RETURN_IF_ERROR(
          lora_.Forward(ctx, l, kLoraFcProj, dec_gelu_.data(), dec_tmp_.data(), rows, true));
      RETURN_IF_ERROR(ops.Add(s, dec_x_.data(), dec_x_.data(), dec_tmp_.data(), n));
    }
    // The logits of the last row alone: the next token's.
    const void* last = static_cast<const char*>(dec_x_.data()) + (n - C) * bytes;
    const void* pf = ctx.params[L + 1];
    RETURN_IF_ERROR(ops.LayerNormForward(s, dec_ln_.data(), mean, rstd, last,
                                         At(pf, L + 1, kLnfW), At(pf, L + 1, kLnfB), 1, C));
    return ops.MatmulForward(s, logits_.data(), dec_ln_.data(), At(p0, 0, kWte), nullptr, 1, C,
                             config_.padded_vocab);
  }

  // The embedding (unit 0, also the LM head): its lookup's backward adds only to the rows
  // of wte named by the tokens and to wpe's first seq_len rows.
  std::vector<std::pair<size_t, size_t>> LastStageRanges(int unit, const int32_t* inputs,
                                                         int batch, int seq_len) const override {
    if (unit != 0) return Model::LastStageRanges(unit, inputs, batch, seq_len);
    const size_t wpe = units_[0].tensor(kWpe).offset;
    return TokenRowRanges(0, kWte, inputs, batch, seq_len,
                          {wpe, wpe + static_cast<size_t>(seq_len) * config_.channels});
  }

  std::string Describe() const override {
    return absl::StrFormat("GPT L%d H%d C%d V%s T%d, %.2fM parameters in %d units, %s",
                           config_.layers, config_.heads, config_.channels,
                           VocabText(config_.vocab, config_.padded_vocab),
                           config_.max_seq_len, num_params() / 1e6,
                           static_cast<int>(units_.size()), DTypeName(dtype_));
  }

 private:
  std::vector<std::pair<int, int>> PaddedVocabTensors() const override { return {{0, kWte}}; }

  // Block stage-1's forward: its activations into Acts(l) and, with `output`, its output
  // into blocks_[l].residual3 (the recompute for the backward leaves out the last
  // projection: the backward does not read its result, and the output is kept).
  Status BlockForward(int stage, const StepContext& ctx, bool output) override {
    Ops& ops = *ctx.ops;
    Stream& s = *ctx.stream;
    const int B = ctx.batch, T = ctx.seq_len, C = config_.channels, NH = config_.heads;
    const int N = B * T;
    const int l = stage - 1;
    const void* p = ctx.params[stage];
    BlockActivations& a = Acts(l);
    const void* residual = ResidualInput(l);
    RETURN_IF_ERROR(ops.LayerNormForward(s, a.ln1.data(), a.ln1_mean.as<float>(),
                                         a.ln1_rstd.as<float>(), residual,
                                         At(p, stage, kLn1W), At(p, stage, kLn1B), N, C));
    RETURN_IF_ERROR(ops.MatmulForward(s, a.qkv.data(), a.ln1.data(), At(p, stage, kQkvW),
                                      At(p, stage, kQkvB), N, C, 3 * C));
    RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraQkv, a.ln1.data(), a.qkv.data(), N));
    RETURN_IF_ERROR(ops.AttentionForward(s, a.atty.data(), a.att_stats.as<float>(),
                                         a.qkv.data(), B, T, C, NH, NH));
    // residual2 temporarily holds the attention projection, then the residual sum.
    RETURN_IF_ERROR(ops.MatmulForward(s, a.residual2.data(), a.atty.data(),
                                      At(p, stage, kAttProjW), At(p, stage, kAttProjB), N, C,
                                      C));
    RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraAttProj, a.atty.data(), a.residual2.data(), N));
    RETURN_IF_ERROR(ops.Add(s, a.residual2.data(), a.residual2.data(), residual,
                            static_cast<size_t>(N) * C));
    RETURN_IF_ERROR(ops.LayerNormForward(s, a.ln2.data(), a.ln2_mean.as<float>(),
                                         a.ln2_rstd.as<float>(), a.residual2.data(),
                                         At(p, stage, kLn2W), At(p, stage, kLn2B), N, C));
    RETURN_IF_ERROR(ops.MatmulForward(s, a.fch.data(), a.ln2.data(), At(p, stage, kFcW),
                                      At(p, stage, kFcB), N, C, 4 * C));
    RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraFc, a.ln2.data(), a.fch.data(), N));
    RETURN_IF_ERROR(ops.GeluForward(s, a.fch_gelu.data(), a.fch.data(),
                                    static_cast<size_t>(N) * 4 * C));
    if (!output) return absl::OkStatus();
    void* out = blocks_[l].residual3.data();
    RETURN_IF_ERROR(ops.MatmulForward(s, out, a.fch_gelu.data(), At(p, stage, kFcProjW),
                                      At(p, stage, kFcProjB), N, 4 * C, C));
    RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraFcProj, a.fch_gelu.data(), out, N));
    return ops.Add(s, out, out, a.residual2.data(), static_cast<size_t>(N) * C);
  }

  // A frozen unit's norm gradients: into the sink nobody reads (the weight first, the bias
  // after it).
  void* NormGrad(void* g, int unit, int tensor) {
    if (g != nullptr) return At(g, unit, tensor);
    return static_cast<char*>(norm_sink_.data()) +
           (tensor == kLn1B || tensor == kLn2B || tensor == kLnfB ? config_.channels : 0) *
               DTypeBytes(dtype_);
  }

  // Block l's activations: its own, or (recompute) the one scratch set every block's
  // backward refills by running the block's forward again.
  BlockActivations& Acts(int l) { return config_.recompute ? scratch_ : blocks_[l]; }

  // The residual stream entering block l (l == L: leaving the last block).
  void* ResidualInput(int l) { return l == 0 ? encoded_.data() : blocks_[l - 1].residual3.data(); }

  GptConfig config_;
  // Generation (PrepareDecode): each block's qkv rows of every position, the activations
  // of up to decode_rows_ tokens.
  int decode_len_ = 0, decode_rows_ = 0;
  std::vector<Buffer> decode_cache_;
  Buffer dec_x_, dec_ln_, dec_stats_, dec_att_, dec_att_stats_, dec_tmp_, dec_fc_, dec_gelu_;
  Buffer lnf_mean_, lnf_rstd_;
  Buffer dqkv_, dfch_gelu_, dfch_;
  std::vector<BlockActivations> blocks_;
  BlockActivations scratch_;  // recompute only
};

}  // namespace

std::vector<LoraTargetSpec> GptLoraTargets(const GptConfig& config) {
  const int C = config.channels;
  return {
      {"attn.qkv", {"c_attn"}, "attn.c_attn", C, 3 * C, 0, 3 * C},
      {"attn.proj", {"c_proj"}, "attn.c_proj", C, C, 0, C},
      {"mlp.fc", {"c_fc"}, "mlp.c_fc", C, 4 * C, 0, 4 * C},
      {"mlp.proj", {"c_proj"}, "mlp.c_proj", 4 * C, C, 0, C},
  };
}

Status ValidateGptConfig(const GptConfig& config) {
  std::vector<std::string> problems;
  CheckDecoderShape(config.layers, config.heads, config.channels, config.vocab,
                    config.padded_vocab, config.max_seq_len, &problems);
  return ConfigProblems("GPT", problems);
}

StatusOr<std::unique_ptr<Model>> CreateGpt(const GptConfig& config, DType dtype) {
  RETURN_IF_ERROR(ValidateGptConfig(config));
  std::vector<int> targets;
  if (config.lora.enabled()) {
    ASSIGN_OR_RETURN(targets, ResolveLoraTargets(config.lora.targets, GptLoraTargets(config),
                                                 kGptLoraDefault));
  }
  return std::unique_ptr<Model>(new Gpt(config, dtype, std::move(targets)));
}

}  // namespace strata
