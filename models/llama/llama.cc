// LLaMA model: its units and initialisation, and what it does in each stage the decoder
// skeleton (models/common/decoder.h) runs: the token embedding, the block (RMSNorm,
// grouped-query attention with rotary embeddings and optional q/k norms or qkv biases,
// SwiGLU MLP), the final RMSNorm; and its decode step. The backward mirrors the forward;
// `dres_` carries the gradient of the residual stream between stages.
#include "models/llama/llama.h"

#include <array>
#include <cmath>

#include "models/common/decoder.h"

namespace strata {
namespace {

// Tensor indices inside a block unit, in layout order (kQkvB only with qkv_bias; the q/k
// norms, with qk_norm, follow: Llama::QkParts).
enum BlockTensor { kAttnNorm, kQkvW, kAttProjW, kMlpNorm, kGateUpW, kDownW, kQkvB };
enum EmbedTensor { kTokEmbed };
enum FinalTensor { kNorm };
enum HeadTensor { kLmHead };

struct BlockActivations {
  Buffer ln1, ln1_rstd, qkv, atty, att_stats, residual2, ln2, ln2_rstd, gate_up, swiglu,
      residual3;
  Buffer qk_raw, qk_rstd;  // qk_norm: the q rows then the k rows before their norm; rstd
};

enum LoraTarget { kLoraQ, kLoraK, kLoraV, kLoraAttProj, kLoraGate, kLoraUp, kLoraDown };
constexpr char kLlamaLoraDefault[] = "attn.q,attn.v";

class Llama : public DecoderBase {
 public:
  Llama(const LlamaConfig& config, DType dtype, std::vector<int> lora_targets)
      : DecoderBase(dtype, config.vocab, config.padded_vocab, config.channels, config.layers,
                    config.recompute),
        config_(config) {
    const int C = config.channels, L = config.layers, F = config.ffn_hidden;
    const int hs = config.head_dim, Q = config.heads * hs;
    const int qkv_rows = Q + 2 * config.kv_heads * hs;
    const float std_residual = 0.02f / std::sqrt(2.0f * L);
    UnitLayout embed("embedding");
    embed.MarkVocabRows(
        embed.Add("tok_embeddings", {config.padded_vocab, C}, true, InitKind::kNormal, 0.02f));
    units_.push_back(embed);
    for (int l = 0; l < L; ++l) {
      UnitLayout block("block " + std::to_string(l));
      block.Add("attn_norm.weight", {C}, false, InitKind::kOnes);
      const int kv_rows = config.kv_heads * hs;
      block.MarkLinear(block.Add("attn.qkv.weight", {qkv_rows, C}, true, InitKind::kNormal, 0.02f),
                       {Q, kv_rows, kv_rows});
      block.MarkLinear(block.Add("attn.proj.weight", {C, Q}, true, InitKind::kNormal, std_residual));
      block.Add("mlp_norm.weight", {C}, false, InitKind::kOnes);
      block.MarkLinear(block.Add("mlp.gate_up.weight", {2 * F, C}, true, InitKind::kNormal, 0.02f),
                       {F, F});
      block.MarkLinear(block.Add("mlp.down.weight", {C, F}, true, InitKind::kNormal, std_residual));
      if (config.qkv_bias) block.Add("attn.qkv.bias", {qkv_rows}, false, InitKind::kZeros);
      if (config.qk_norm) {
        block.Add("attn.q_norm.weight", {hs}, false, InitKind::kOnes);
        block.Add("attn.k_norm.weight", {hs}, false, InitKind::kOnes);
      }
      units_.push_back(block);
    }
    UnitLayout final_norm("final norm");
    final_norm.Add("norm.weight", {C}, false, InitKind::kOnes);
    units_.push_back(final_norm);
    head_unit_ = 0;  // tied: the token embedding
    head_tensor_ = kTokEmbed;
    if (!config.tie_embeddings) {
      UnitLayout head("lm_head");
      head.MarkVocabRows(
          head.Add("lm_head.weight", {config.padded_vocab, C}, true, InitKind::kNormal, 0.02f));
      units_.push_back(head);
      head_unit_ = L + 2;
      head_tensor_ = kLmHead;
    }

    if (config.lora.enabled()) {
      lora_ = LoraAdapters(config.lora, LlamaLoraTargets(config), std::move(lora_targets), L,
                           dtype, &units_);
    }

    BuildStages();
  }

  Status PrepareActivations(Device& device, int batch, int seq_len) override {
    batch_ = batch;
    seq_len_ = seq_len;
    const size_t N = static_cast<size_t>(batch) * seq_len, C = config_.channels;
    const size_t NH = config_.heads, V = config_.padded_vocab, F = config_.ffn_hidden;
    const size_t Q = QueryWidth(), QKV = Q + 2 * static_cast<size_t>(config_.kv_heads) * HeadSize();
    auto act = [&](size_t elements, DType type, const std::string& what) {
      return Activation(device, elements, type, what);
    };
    blocks_.clear();
    blocks_.resize(config_.layers);
    ASSIGN_OR_RETURN(encoded_, act(N * C, dtype_, "encoded"));
    for (int l = 0; l < config_.layers; ++l) {
      ASSIGN_OR_RETURN(blocks_[l].residual3, act(N * C, dtype_, "residual3"));
    }
    for (int l = 0; l < (config_.recompute ? 1 : config_.layers); ++l) {
      BlockActivations& a = config_.recompute ? scratch_ : blocks_[l];
      ASSIGN_OR_RETURN(a.ln1, act(N * C, dtype_, "attn norm"));
      ASSIGN_OR_RETURN(a.ln1_rstd, act(N, DType::kF32, "attn norm rstd"));
      ASSIGN_OR_RETURN(a.qkv, act(N * QKV, dtype_, "qkv"));
      if (config_.qk_norm) {
        ASSIGN_OR_RETURN(a.qk_raw, act(N * QkHeads() * HeadSize(), dtype_, "q/k before norm"));
        ASSIGN_OR_RETURN(a.qk_rstd, act(N * QkHeads(), DType::kF32, "q/k norm rstd"));
      }
      ASSIGN_OR_RETURN(a.atty, act(N * Q, dtype_, "attention out"));
      ASSIGN_OR_RETURN(a.att_stats, act(N * NH, DType::kF32, "attention stats"));
      ASSIGN_OR_RETURN(a.residual2, act(N * C, dtype_, "residual2"));
      ASSIGN_OR_RETURN(a.ln2, act(N * C, dtype_, "mlp norm"));
      ASSIGN_OR_RETURN(a.ln2_rstd, act(N, DType::kF32, "mlp norm rstd"));
      ASSIGN_OR_RETURN(a.gate_up, act(N * 2 * F, dtype_, "gate_up"));
      ASSIGN_OR_RETURN(a.swiglu, act(N * F, dtype_, "swiglu"));
    }
    ASSIGN_OR_RETURN(lnf_, act(N * C, dtype_, "final norm"));
    ASSIGN_OR_RETURN(lnf_rstd_, act(N, DType::kF32, "final norm rstd"));
    ASSIGN_OR_RETURN(logits_, act(N * V, dtype_, "logits"));
    ASSIGN_OR_RETURN(losses_, act(N, DType::kF32, "losses"));
    ASSIGN_OR_RETURN(dres_, act(N * C, dtype_, "d residual"));
    ASSIGN_OR_RETURN(dbtc_, act(N * std::max(C, Q), dtype_, "d scratch [B,T,C or H hs]"));
    ASSIGN_OR_RETURN(dqkv_, act(N * QKV, dtype_, "d qkv"));
    ASSIGN_OR_RETURN(dswiglu_, act(N * F, dtype_, "d swiglu"));
    ASSIGN_OR_RETURN(dgate_up_, act(N * 2 * F, dtype_, "d gate_up"));
    if (config_.qk_norm) {
      ASSIGN_OR_RETURN(qk_rows_, act(N * QkHeads() * HeadSize(), dtype_, "q/k norm rows"));
      ASSIGN_OR_RETURN(qk_drows_, act(N * QkHeads() * HeadSize(), dtype_, "d q/k norm rows"));
    }
    if (lora_.active()) {
      ASSIGN_OR_RETURN(norm_sink_,
                       act(std::max<size_t>(C, HeadSize()), dtype_, "frozen norms' gradient sink"));
    }
    return lora_.Prepare(device, static_cast<int>(N), config_.layers);
  }

  Status EmbedForward(const StepContext& ctx) override {
    return ctx.ops->EncoderForward(*ctx.stream, encoded_.data(), ctx.inputs,
                                   At(ctx.params[0], 0, kTokEmbed), nullptr, ctx.batch,
                                   ctx.seq_len, config_.channels);
  }

  Status FinalNormForward(const StepContext& ctx) override {
    const int stage = config_.layers + 1;
    return ctx.ops->RmsNormForward(*ctx.stream, lnf_.data(), lnf_rstd_.as<float>(),
                                   ResidualInput(config_.layers),
                                   At(ctx.params[stage], stage, kNorm),
                                   ctx.batch * ctx.seq_len, config_.channels, config_.norm_eps);
  }

  Status FinalNormBackward(const StepContext& ctx) override {
    const int stage = config_.layers + 1;
    return ctx.ops->RmsNormBackward(*ctx.stream, dres_.data(),
                                    NormGrad(ctx.grads[stage], stage, kNorm), dbtc_.data(),
                                    ResidualInput(config_.layers),
                                    At(ctx.params[stage], stage, kNorm), lnf_rstd_.as<float>(),
                                    ctx.batch * ctx.seq_len, config_.channels);
  }

  Status EmbedBackward(const StepContext& ctx) override {
    if (ctx.grads[0] == nullptr) return absl::OkStatus();  // a frozen embedding
    return ctx.ops->EncoderBackward(*ctx.stream, At(ctx.grads[0], 0, kTokEmbed), nullptr,
                                    dres_.data(), ctx.inputs, ctx.batch, ctx.seq_len,
                                    config_.channels);
  }

  Status BlockBackward(int stage, const StepContext& ctx) override {
    Ops& ops = *ctx.ops;
    Device& device = *ctx.device;
    Stream& s = *ctx.stream;
    const int B = ctx.batch, T = ctx.seq_len, C = config_.channels, F = config_.ffn_hidden;
    const int NH = config_.heads, NKV = config_.kv_heads, hs = HeadSize();
    const int N = B * T, Q = QueryWidth(), QKV = Q + 2 * NKV * hs;
    const size_t bytes = DTypeBytes(dtype_);
    const size_t btc_bytes = static_cast<size_t>(N) * C * bytes;
    const size_t btq_bytes = static_cast<size_t>(N) * Q * bytes;
    const int l = stage - 1;
    const void* p = ctx.params[stage];
    void* g = ctx.grads[stage];
    BlockActivations& a = Acts(l);
    // residual3 = residual2 + down(swiglu(gate_up(mlp_norm(residual2)))).
    RETURN_IF_ERROR(device.MemsetAsync(dswiglu_.data(), 0, static_cast<size_t>(N) * F * bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dswiglu_.data(), Grad(g, stage, kDownW), nullptr,
                                       dres_.data(), a.swiglu.data(), At(p, stage, kDownW), N, F,
                                       C));
    RETURN_IF_ERROR(lora_.Backward(ctx, l, kLoraDown, a.swiglu.data(), dres_.data(),
                                   dswiglu_.data(), N));
    RETURN_IF_ERROR(
        device.MemsetAsync(dgate_up_.data(), 0, static_cast<size_t>(N) * 2 * F * bytes, s));
    RETURN_IF_ERROR(ops.SwiGluBackward(s, dgate_up_.data(), a.gate_up.data(), dswiglu_.data(), N,
                                       F));
    RETURN_IF_ERROR(device.MemsetAsync(dbtc_.data(), 0, btc_bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dbtc_.data(), Grad(g, stage, kGateUpW), nullptr,
                                       dgate_up_.data(), a.ln2.data(), At(p, stage, kGateUpW), N,
                                       C, 2 * F));
    for (int t : {kLoraGate, kLoraUp}) {
      RETURN_IF_ERROR(
          lora_.Backward(ctx, l, t, a.ln2.data(), dgate_up_.data(), dbtc_.data(), N));
    }
    RETURN_IF_ERROR(ops.RmsNormBackward(s, dres_.data(), NormGrad(g, stage, kMlpNorm),
                                        dbtc_.data(),
                                        a.residual2.data(), At(p, stage, kMlpNorm),
                                        a.ln2_rstd.as<float>(), N, C));
    // residual2 = residual + proj(attention(rope(qkv(attn_norm(residual))))).
    RETURN_IF_ERROR(device.MemsetAsync(dbtc_.data(), 0, btq_bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dbtc_.data(), Grad(g, stage, kAttProjW), nullptr,
                                       dres_.data(), a.atty.data(), At(p, stage, kAttProjW), N, Q,
                                       C));
    RETURN_IF_ERROR(lora_.Backward(ctx, l, kLoraAttProj, a.atty.data(), dres_.data(),
                                   dbtc_.data(), N));
    RETURN_IF_ERROR(device.MemsetAsync(dqkv_.data(), 0, static_cast<size_t>(N) * QKV * bytes, s));
    RETURN_IF_ERROR(ops.AttentionBackward(s, dqkv_.data(), dbtc_.data(), a.qkv.data(),
                                          a.atty.data(), a.att_stats.as<float>(), B, T, Q, NH,
                                          NKV));
    // The attention saw the rotated q and k: turn their gradient back.
    RETURN_IF_ERROR(ops.RopeBackward(s, dqkv_.data(), B, T, NH, NKV, hs, config_.rope, 0));
    if (config_.qk_norm) RETURN_IF_ERROR(QkNormBackward(ctx, stage, a, g, N));
    RETURN_IF_ERROR(device.MemsetAsync(dbtc_.data(), 0, btc_bytes, s));
    RETURN_IF_ERROR(ops.MatmulBackward(s, dbtc_.data(), Grad(g, stage, kQkvW),
                                       config_.qkv_bias ? Grad(g, stage, kQkvB) : nullptr,
                                       dqkv_.data(), a.ln1.data(), At(p, stage, kQkvW), N, C,
                                       QKV));
    for (int t : {kLoraQ, kLoraK, kLoraV}) {
      RETURN_IF_ERROR(lora_.Backward(ctx, l, t, a.ln1.data(), dqkv_.data(), dbtc_.data(), N));
    }
    return ops.RmsNormBackward(s, dres_.data(), NormGrad(g, stage, kAttnNorm), dbtc_.data(),
                               ResidualInput(l), At(p, stage, kAttnNorm),
                               a.ln1_rstd.as<float>(), N, C);
  }

  Status PrepareDecode(Device& device, int max_len, int max_rows) override {
    const size_t C = config_.channels, F = config_.ffn_hidden, Q = QueryWidth();
    const size_t QKV = Q + 2 * static_cast<size_t>(config_.kv_heads) * HeadSize();
    const size_t R = static_cast<size_t>(max_rows);
    decode_len_ = max_len;
    decode_rows_ = max_rows;
    auto act = [&](size_t elements, DType type, const std::string& what) {
      return Activation(device, elements, type, what);
    };
    decode_cache_.clear();
    for (int l = 0; l < config_.layers; ++l) {
      ASSIGN_OR_RETURN(Buffer cache, act(static_cast<size_t>(max_len) * QKV, dtype_, "kv cache"));
      decode_cache_.push_back(std::move(cache));
    }
    ASSIGN_OR_RETURN(dec_x_, act(R * C, dtype_, "decode residual"));
    ASSIGN_OR_RETURN(dec_ln_, act(R * C, dtype_, "decode norm"));
    ASSIGN_OR_RETURN(dec_rstd_, act(R, DType::kF32, "decode norm rstd"));
    ASSIGN_OR_RETURN(dec_att_, act(R * Q, dtype_, "decode attention"));
    ASSIGN_OR_RETURN(dec_att_stats_, act(R * config_.heads, DType::kF32, "decode attention stats"));
    ASSIGN_OR_RETURN(dec_tmp_, act(R * C, dtype_, "decode projection"));
    ASSIGN_OR_RETURN(dec_gate_up_, act(R * 2 * F, dtype_, "decode gate_up"));
    ASSIGN_OR_RETURN(dec_swiglu_, act(R * F, dtype_, "decode swiglu"));
    if (config_.qk_norm) {
      const size_t rows = R * QkHeads() * HeadSize();
      ASSIGN_OR_RETURN(dec_qk_raw_, act(rows, dtype_, "decode q/k before norm"));
      ASSIGN_OR_RETURN(dec_qk_rows_, act(rows, dtype_, "decode q/k norm rows"));
      ASSIGN_OR_RETURN(dec_qk_rstd_, act(R * QkHeads(), DType::kF32, "decode q/k norm rstd"));
    }
    ASSIGN_OR_RETURN(logits_, act(config_.padded_vocab, dtype_, "decode logits"));
    return lora_.PrepareDecode(device, max_rows);
  }

  Status DecodeStep(const StepContext& ctx, int position, int rows) override {
    if (rows < 1 || rows > decode_rows_ || position < 0 || position + rows > decode_len_) {
      return absl::OutOfRangeError(
          absl::StrFormat("decode of %d rows (at most %d) at position %d outside the cache (%d)",
                          rows, decode_rows_, position, decode_len_));
    }
    Ops& ops = *ctx.ops;
    Stream& s = *ctx.stream;
    const int C = config_.channels, F = config_.ffn_hidden, L = config_.layers;
    const int NH = config_.heads, NKV = config_.kv_heads, hs = HeadSize(), Q = QueryWidth();
    const size_t QKV = Q + 2 * static_cast<size_t>(NKV) * hs;
    const size_t bytes = DTypeBytes(dtype_);
    const size_t n = static_cast<size_t>(rows) * C;
    const float eps = config_.norm_eps;
    float* rstd = dec_rstd_.as<float>();
    RETURN_IF_ERROR(ops.EncoderForward(s, dec_x_.data(), ctx.inputs,
                                       At(ctx.params[0], 0, kTokEmbed), nullptr, 1, rows, C));
    for (int l = 0; l < L; ++l) {
      const int u = l + 1;
      const void* p = ctx.params[u];
      char* cache = static_cast<char*>(decode_cache_[l].data());
      void* qkv_rows = cache + static_cast<size_t>(position) * QKV * bytes;
      RETURN_IF_ERROR(ops.RmsNormForward(s, dec_ln_.data(), rstd, dec_x_.data(),
                                         At(p, u, kAttnNorm), rows, C, eps));
      RETURN_IF_ERROR(ops.MatmulForward(s, qkv_rows, dec_ln_.data(), At(p, u, kQkvW), QkvBias(p, u),
                                        rows, C, static_cast<int>(QKV)));
      for (int t : {kLoraQ, kLoraK, kLoraV}) {
        RETURN_IF_ERROR(lora_.Forward(ctx, l, t, dec_ln_.data(), qkv_rows, rows, true));
      }
      if (config_.qk_norm) {
        RETURN_IF_ERROR(QkNormForward(ops, s, qkv_rows, dec_qk_raw_.data(), dec_qk_rstd_.as<float>(),
                                      dec_qk_rows_.data(), p, u, rows));
      }
      RETURN_IF_ERROR(ops.RopeForward(s, qkv_rows, 1, rows, NH, NKV, hs, config_.rope, position));
      // Each row over the cache up to its own position (its keys are in by now): from
      // position 0, the causal attention of all rows in one call (the training kernel over
      // the cache's first rows); after it, row by row.
      if (position == 0 && rows > 1) {
        RETURN_IF_ERROR(ops.AttentionForward(s, dec_att_.data(), dec_att_stats_.as<float>(),
                                             cache, 1, rows, Q, NH, NKV));
      } else {
        for (int r = 0; r < rows; ++r) {
          RETURN_IF_ERROR(ops.AttentionDecode(
              s, static_cast<char*>(dec_att_.data()) + static_cast<size_t>(r) * Q * bytes, cache,
              position + r + 1, Q, NH, NKV));
        }
      }
      RETURN_IF_ERROR(ops.MatmulForward(s, dec_tmp_.data(), dec_att_.data(), At(p, u, kAttProjW),
                                        nullptr, rows, Q, C));
      RETURN_IF_ERROR(
          lora_.Forward(ctx, l, kLoraAttProj, dec_att_.data(), dec_tmp_.data(), rows, true));
      RETURN_IF_ERROR(ops.Add(s, dec_x_.data(), dec_x_.data(), dec_tmp_.data(), n));
      RETURN_IF_ERROR(ops.RmsNormForward(s, dec_ln_.data(), rstd, dec_x_.data(),
                                         At(p, u, kMlpNorm), rows, C, eps));
      RETURN_IF_ERROR(ops.MatmulForward(s, dec_gate_up_.data(), dec_ln_.data(),
                                        At(p, u, kGateUpW), nullptr, rows, C, 2 * F));
      for (int t : {kLoraGate, kLoraUp}) {
        RETURN_IF_ERROR(
            lora_.Forward(ctx, l, t, dec_ln_.data(), dec_gate_up_.data(), rows, true));
      }
      RETURN_IF_ERROR(ops.SwiGluForward(s, dec_swiglu_.data(), dec_gate_up_.data(), rows, F));
      RETURN_IF_ERROR(ops.MatmulForward(s, dec_tmp_.data(), dec_swiglu_.data(), At(p, u, kDownW),
                                        nullptr, rows, F, C));
      RETURN_IF_ERROR(
          lora_.Forward(ctx, l, kLoraDown, dec_swiglu_.data(), dec_tmp_.data(), rows, true));
      RETURN_IF_ERROR(ops.Add(s, dec_x_.data(), dec_x_.data(), dec_tmp_.data(), n));
    }
    // The logits of the last row alone: the next token's.
    const void* last = static_cast<const char*>(dec_x_.data()) + (n - C) * bytes;
    RETURN_IF_ERROR(ops.RmsNormForward(s, dec_ln_.data(), rstd, last,
                                       At(ctx.params[L + 1], L + 1, kNorm), 1, C, eps));
    return ops.MatmulForward(s, logits_.data(), dec_ln_.data(), HeadWeight(ctx), nullptr,
                             1, C, config_.padded_vocab);
  }

  // A tied embedding (also the LM head): its lookup's backward adds only to the rows named
  // by the tokens. Untied, every unit has one backward stage.
  std::vector<std::pair<size_t, size_t>> LastStageRanges(int unit, const int32_t* inputs,
                                                         int batch, int seq_len) const override {
    if (unit != 0 || !config_.tie_embeddings) {
      return Model::LastStageRanges(unit, inputs, batch, seq_len);
    }
    return TokenRowRanges(0, kTokEmbed, inputs, batch, seq_len, {0, 0});
  }

  std::string Describe() const override {
    const std::string vocab = VocabText(config_.vocab, config_.padded_vocab);
    return absl::StrFormat(
        "LLaMA L%d H%d KV%d%s C%d F%d V%s T%d rope %s%s, %s head, %.2fM parameters in %d units, "
        "%s",
        config_.layers, config_.heads, config_.kv_heads,
        QueryWidth() == config_.channels ? "" : absl::StrCat(" hs", config_.head_dim).c_str(),
        config_.channels, config_.ffn_hidden, vocab, config_.max_seq_len,
        DescribeRope(config_.rope),
        (std::string(config_.qkv_bias ? ", qkv bias" : "") + (config_.qk_norm ? ", q/k norm" : ""))
            .c_str(),
        config_.tie_embeddings ? "tied" : "untied", num_params() / 1e6,
        static_cast<int>(units_.size()), DTypeName(dtype_));
  }

 private:
  std::vector<std::pair<int, int>> PaddedVocabTensors() const override {
    if (config_.tie_embeddings) return {{0, kTokEmbed}};
    return {{0, kTokEmbed}, {head_unit_, kLmHead}};
  }

  int HeadSize() const { return config_.head_dim; }
  int QueryWidth() const { return config_.heads * config_.head_dim; }  // q's and the attention's

  // Block stage-1's forward: its activations into Acts(l) and, with `output`, its output
  // into blocks_[l].residual3 (the recompute for the backward leaves out the last
  // projection, whose result the backward does not read).
  Status BlockForward(int stage, const StepContext& ctx, bool output) override {
    Ops& ops = *ctx.ops;
    Stream& s = *ctx.stream;
    const int B = ctx.batch, T = ctx.seq_len, C = config_.channels, F = config_.ffn_hidden;
    const int NH = config_.heads, NKV = config_.kv_heads, hs = HeadSize();
    const int N = B * T, Q = QueryWidth(), QKV = Q + 2 * NKV * hs;
    const int l = stage - 1;
    const void* p = ctx.params[stage];
    BlockActivations& a = Acts(l);
    const void* residual = ResidualInput(l);
    const float eps = config_.norm_eps;
    RETURN_IF_ERROR(ops.RmsNormForward(s, a.ln1.data(), a.ln1_rstd.as<float>(), residual,
                                       At(p, stage, kAttnNorm), N, C, eps));
    RETURN_IF_ERROR(ops.MatmulForward(s, a.qkv.data(), a.ln1.data(), At(p, stage, kQkvW),
                                      QkvBias(p, stage), N, C, QKV));
    for (int t : {kLoraQ, kLoraK, kLoraV}) {  // before the rotation, as Hugging Face's
      RETURN_IF_ERROR(lora_.Forward(ctx, l, t, a.ln1.data(), a.qkv.data(), N));
    }
    if (config_.qk_norm) {
      RETURN_IF_ERROR(QkNormForward(ops, s, a.qkv.data(), a.qk_raw.data(), a.qk_rstd.as<float>(),
                                    qk_rows_.data(), p, stage, N));
    }
    RETURN_IF_ERROR(ops.RopeForward(s, a.qkv.data(), B, T, NH, NKV, hs, config_.rope, 0));
    RETURN_IF_ERROR(ops.AttentionForward(s, a.atty.data(), a.att_stats.as<float>(), a.qkv.data(), B,
                                         T, Q, NH, NKV));
    // residual2 temporarily holds the attention projection, then the residual sum.
    RETURN_IF_ERROR(ops.MatmulForward(s, a.residual2.data(), a.atty.data(), At(p, stage, kAttProjW),
                                      nullptr, N, Q, C));
    RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraAttProj, a.atty.data(), a.residual2.data(), N));
    RETURN_IF_ERROR(ops.Add(s, a.residual2.data(), a.residual2.data(), residual,
                            static_cast<size_t>(N) * C));
    RETURN_IF_ERROR(ops.RmsNormForward(s, a.ln2.data(), a.ln2_rstd.as<float>(), a.residual2.data(),
                                       At(p, stage, kMlpNorm), N, C, eps));
    RETURN_IF_ERROR(ops.MatmulForward(s, a.gate_up.data(), a.ln2.data(), At(p, stage, kGateUpW),
                                      nullptr, N, C, 2 * F));
    for (int t : {kLoraGate, kLoraUp}) {
      RETURN_IF_ERROR(lora_.Forward(ctx, l, t, a.ln2.data(), a.gate_up.data(), N));
    }
    RETURN_IF_ERROR(ops.SwiGluForward(s, a.swiglu.data(), a.gate_up.data(), N, F));
    if (!output) return absl::OkStatus();
    void* out = blocks_[l].residual3.data();
    RETURN_IF_ERROR(ops.MatmulForward(s, out, a.swiglu.data(), At(p, stage, kDownW), nullptr, N,
                                      F, C));
    RETURN_IF_ERROR(lora_.Forward(ctx, l, kLoraDown, a.swiglu.data(), out, N));
    return ops.Add(s, out, out, a.residual2.data(), static_cast<size_t>(N) * C);
  }

  BlockActivations& Acts(int l) { return config_.recompute ? scratch_ : blocks_[l]; }

  // A frozen unit's norm gradients: into the sink nobody reads.
  void* NormGrad(void* g, int unit, int tensor) {
    return g == nullptr ? norm_sink_.data() : At(g, unit, tensor);
  }

  // The q and k heads of a token (those qk_norm normalises).
  int QkHeads() const { return config_.heads + config_.kv_heads; }

  // qk_norm's two parts: the q heads [0, NH) with attn.q_norm, the k heads [NH, NH + NKV)
  // with attn.k_norm; in the rows layout (CopyHeads) the q rows [N NH, hs] come first, then
  // the k rows, from row `row0`.
  struct QkPart {
    int first, count, tensor;
    size_t row0;
  };
  std::array<QkPart, 2> QkParts(int N) const {
    const int q_norm = kQkvB + (config_.qkv_bias ? 1 : 0);
    return {{{0, config_.heads, q_norm, 0},
             {config_.heads, config_.kv_heads, q_norm + 1,
              static_cast<size_t>(N) * config_.heads}}};
  }

  // Qwen3's q/k norm, in place on the q and k heads of qkv [N, (NH + 2 NKV) hs]: the heads
  // to `raw` (rows: kept for the backward), normed into `rows` (scratch) with their rstd,
  // and back into qkv.
  Status QkNormForward(Ops& ops, Stream& s, void* qkv, void* raw, float* rstd, void* rows,
                       const void* p, int unit, int N) {
    const int hs = HeadSize(), heads = config_.heads + 2 * config_.kv_heads;
    const size_t row_bytes = static_cast<size_t>(hs) * DTypeBytes(dtype_);
    for (const QkPart& part : QkParts(N)) {
      void* part_raw = static_cast<char*>(raw) + part.row0 * row_bytes;
      void* part_rows = static_cast<char*>(rows) + part.row0 * row_bytes;
      RETURN_IF_ERROR(ops.CopyHeads(s, qkv, part_raw, N, heads, part.first, part.count, hs, true));
      RETURN_IF_ERROR(ops.RmsNormForward(s, part_rows, rstd + part.row0, part_raw,
                                         At(p, unit, part.tensor), N * part.count, hs,
                                         config_.norm_eps));
      RETURN_IF_ERROR(
          ops.CopyHeads(s, qkv, part_rows, N, heads, part.first, part.count, hs, false));
    }
    return absl::OkStatus();
  }

  // Its backward, in place on dqkv_'s q and k heads (as RopeBackward: the gradient w.r.t.
  // the normed heads becomes the gradient w.r.t. the raw ones); the norms' weight gradients
  // accumulate into `g` (a frozen block: the sink).
  Status QkNormBackward(const StepContext& ctx, int stage, BlockActivations& a, void* g, int N) {
    Ops& ops = *ctx.ops;
    Stream& s = *ctx.stream;
    const int hs = HeadSize(), heads = config_.heads + 2 * config_.kv_heads;
    const void* p = ctx.params[stage];
    const size_t row_bytes = static_cast<size_t>(hs) * DTypeBytes(dtype_);
    RETURN_IF_ERROR(ctx.device->MemsetAsync(qk_drows_.data(), 0,
                                            static_cast<size_t>(N) * QkHeads() * row_bytes, s));
    for (const QkPart& part : QkParts(N)) {
      char* douts = static_cast<char*>(qk_rows_.data()) + part.row0 * row_bytes;
      char* dinps = static_cast<char*>(qk_drows_.data()) + part.row0 * row_bytes;
      const char* raw = static_cast<const char*>(a.qk_raw.data()) + part.row0 * row_bytes;
      RETURN_IF_ERROR(
          ops.CopyHeads(s, dqkv_.data(), douts, N, heads, part.first, part.count, hs, true));
      RETURN_IF_ERROR(ops.RmsNormBackward(s, dinps, NormGrad(g, stage, part.tensor), douts, raw,
                                          At(p, stage, part.tensor),
                                          a.qk_rstd.as<float>() + part.row0, N * part.count, hs));
      RETURN_IF_ERROR(
          ops.CopyHeads(s, dqkv_.data(), dinps, N, heads, part.first, part.count, hs, false));
    }
    return absl::OkStatus();
  }

  // The qkv projection's bias (Qwen2), or null.
  const void* QkvBias(const void* p, int unit) const {
    return config_.qkv_bias ? At(p, unit, kQkvB) : nullptr;
  }

  void* ResidualInput(int l) { return l == 0 ? encoded_.data() : blocks_[l - 1].residual3.data(); }

  LlamaConfig config_;
  // Generation (PrepareDecode): each block's qkv rows (k, v rotated) of every position,
  // the activations of up to decode_rows_ tokens.
  int decode_len_ = 0, decode_rows_ = 0;
  std::vector<Buffer> decode_cache_;
  Buffer dec_x_, dec_ln_, dec_rstd_, dec_att_, dec_att_stats_, dec_tmp_, dec_gate_up_,
      dec_swiglu_;
  Buffer dec_qk_raw_, dec_qk_rows_, dec_qk_rstd_;  // qk_norm
  Buffer qk_rows_, qk_drows_;                      // qk_norm: rows of heads, scratch
  Buffer lnf_rstd_;
  Buffer dqkv_, dswiglu_, dgate_up_;
  std::vector<BlockActivations> blocks_;
  BlockActivations scratch_;  // recompute only
};

}  // namespace

std::vector<LoraTargetSpec> LlamaLoraTargets(const LlamaConfig& config) {
  const int C = config.channels, F = config.ffn_hidden;
  const int q = config.heads * config.head_dim, kv = config.kv_heads * config.head_dim;
  const int qkv = q + 2 * kv;
  return {
      {"attn.q", {"q_proj"}, "self_attn.q_proj", C, qkv, 0, q},
      {"attn.k", {"k_proj"}, "self_attn.k_proj", C, qkv, q, kv},
      {"attn.v", {"v_proj"}, "self_attn.v_proj", C, qkv, q + kv, kv},
      {"attn.proj", {"o_proj"}, "self_attn.o_proj", q, C, 0, C},
      {"mlp.gate", {"gate_proj"}, "mlp.gate_proj", C, 2 * F, 0, F},
      {"mlp.up", {"up_proj"}, "mlp.up_proj", C, 2 * F, F, F},
      {"mlp.down", {"down_proj"}, "mlp.down_proj", F, C, 0, C},
  };
}

Status ValidateLlamaConfig(const LlamaConfig& config) {
  std::vector<std::string> problems;
  CheckDecoderShape(config.layers, config.heads, config.channels, config.vocab, config.padded_vocab,
                    config.max_seq_len, &problems, /*own_head_dim=*/true);
  if (config.kv_heads < 1) problems.push_back("model.kv_heads must be >= 1");
  if (config.ffn_hidden < 1) problems.push_back("model.ffn_hidden must be >= 1");
  if (Status rope = CheckRopeSpec(config.rope); !rope.ok()) {
    problems.push_back(std::string(rope.message()));
  }
  if (!(config.norm_eps > 0.0f)) problems.push_back("model.norm_eps must be > 0");
  if (config.head_dim < 2 || config.head_dim % 2 != 0) {
    problems.push_back(absl::StrFormat(
        "the head size (model.head_dim, else model.channels / model.heads: %d) must be even and "
        ">= 2 for rotary embeddings",
        config.head_dim));
  }
  if (config.heads >= 1 && config.kv_heads >= 1 && config.heads % config.kv_heads != 0) {
    problems.push_back(absl::StrFormat("model.heads (%d) must be a multiple of model.kv_heads (%d)",
                                       config.heads, config.kv_heads));
  }
  return ConfigProblems("LLaMA", problems);
}

StatusOr<std::unique_ptr<Model>> CreateLlama(const LlamaConfig& config, DType dtype) {
  RETURN_IF_ERROR(ValidateLlamaConfig(config));
  std::vector<int> targets;
  if (config.lora.enabled()) {
    ASSIGN_OR_RETURN(targets, ResolveLoraTargets(config.lora.targets, LlamaLoraTargets(config),
                                                 kLlamaLoraDefault));
  }
  return std::unique_ptr<Model>(new Llama(config, dtype, std::move(targets)));
}

}  // namespace strata
