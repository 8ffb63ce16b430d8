// See create_model.h.
#include "models/create_model.h"

#include "models/common/decoder.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"

namespace strata {

ModelOptions ResolveModelOptions(const ModelOptions& model) {
  ModelOptions resolved = model;
  if (resolved.kv_heads == 0) resolved.kv_heads = resolved.heads;
  if (resolved.head_dim == 0 && resolved.heads > 0) {
    resolved.head_dim = resolved.channels / resolved.heads;
  }
  if (resolved.ffn_hidden == 0) {
    resolved.ffn_hidden = model.family == ModelFamily::kGpt
                              ? 4 * model.channels
                              : (8 * model.channels / 3 + 63) / 64 * 64;
  }
  if (resolved.padded_vocab == 0) resolved.padded_vocab = DefaultPaddedVocab(model.vocab);
  return resolved;
}

LlamaConfig LlamaConfigOf(const ModelOptions& model) {
  const ModelOptions m = ResolveModelOptions(model);
  LlamaConfig config;
  config.layers = m.layers;
  config.heads = m.heads;
  config.kv_heads = m.kv_heads;
  config.head_dim = m.head_dim;
  config.channels = m.channels;
  config.ffn_hidden = m.ffn_hidden;
  config.vocab = m.vocab;
  config.padded_vocab = m.padded_vocab;
  config.max_seq_len = m.max_seq_len;
  config.rope = m.rope;
  config.norm_eps = m.norm_eps;
  config.tie_embeddings = m.tie_embeddings;
  config.qkv_bias = m.qkv_bias;
  config.qk_norm = m.qk_norm;
  return config;
}

StatusOr<std::unique_ptr<Model>> CreateModel(const ModelOptions& options, Recompute recompute,
                                             DType dtype, const LoraOptions& lora_options) {
  const ModelOptions m = ResolveModelOptions(options);
  const bool blocks = recompute == Recompute::kBlocks;
  LoraConfig lora;
  lora.rank = lora_options.rank;
  lora.alpha = lora_options.alpha;
  lora.targets = lora_options.targets;
  lora.dropout = lora_options.dropout;
  if (m.family == ModelFamily::kLlama) {
    LlamaConfig config = LlamaConfigOf(m);
    config.recompute = blocks;
    config.lora = lora;
    return CreateLlama(config, dtype);
  }
  if (m.kv_heads != m.heads || m.ffn_hidden != 4 * m.channels || !m.tie_embeddings ||
      m.head_dim * m.heads != m.channels) {
    return absl::InvalidArgumentError(
        "model.family=gpt has multi-head attention (kv_heads = heads, head_dim = C / heads), "
        "a 4C MLP and a tied LM head; kv_heads, head_dim, ffn_hidden and tie_embeddings apply "
        "to model.family=llama");
  }
  GptConfig config;
  config.layers = m.layers;
  config.heads = m.heads;
  config.channels = m.channels;
  config.vocab = m.vocab;
  config.padded_vocab = m.padded_vocab;
  config.max_seq_len = m.max_seq_len;
  config.recompute = blocks;
  config.lora = lora;
  return CreateGpt(config, dtype);
}

}  // namespace strata
