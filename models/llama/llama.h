// A LLaMA-family decoder (Llama, Mistral, Qwen share its shape) as units and stages for the
// runtime (runtime/model.h): units = [embedding (tok_embeddings), block 0..L-1, final norm,
// (lm_head when untied)]; stages = [embed, block 0..L-1, final_norm, lm_head], where a tied
// lm_head reuses the embedding unit. Pre-norm blocks: RMSNorm, causal grouped-query
// attention with rotary position embeddings (Hugging Face's rotate-half layout) on q and k,
// RMSNorm, SwiGLU MLP; no biases, no position embedding.
// Fused matrices (one GEMM each): attn.qkv.weight [(H + 2 KV) hs, C] = (q_proj | k_proj |
// v_proj), mlp.gate_up.weight [2F, C] = (gate_proj | up_proj); attn.proj.weight [C, H hs].
// The head width hs is C / H in most models; Mistral Nemo and Qwen3 set it apart. With
// qk_norm (Qwen3) each q head and each k head is RMSNormed over its hs channels
// (attn.q_norm.weight, attn.k_norm.weight [hs], shared by the heads) after the projection
// and before the rotation: the heads go to rows of their own (Ops::CopyHeads), through
// RmsNorm, and back.
// Initialisation as the GPT (std 0.02, output projections scaled by 1/sqrt(2L)); norms 1.
// Thread-safety: as Model.
#pragma once

#include <memory>

#include "core/rope.h"
#include "models/common/lora.h"
#include "runtime/model.h"

namespace strata {

struct LlamaConfig {
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;        // key/value heads; divides heads
  int head_dim = 16;       // hs, each head's width (even); heads * hs need not be C
  int channels = 64;       // C, the residual stream's width
  int ffn_hidden = 172;    // F, the MLP's inner width
  int vocab = 256;         // real vocabulary
  int padded_vocab = 256;  // rows of the embedding / LM head (>= vocab; extra rows stay zero)
  int max_seq_len = 64;    // longest sequence (no table depends on it)
  RopeSpec rope;           // theta and frequency scaling
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;
  bool qkv_bias = false;   // the q, k, v projections have a bias (Qwen2)
  bool qk_norm = false;    // each q and k head is RMSNormed before the rotation (Qwen3)
  bool recompute = false;  // as GptConfig::recompute
  // Low-rank adapters (lora.*): rank 0 = none. Targets: attn.q (q_proj), attn.k (k_proj),
  // attn.v (v_proj), attn.proj (o_proj), mlp.gate (gate_proj), mlp.up (up_proj), mlp.down
  // (down_proj); default attn.q, attn.v (PEFT's). q, k, v are column slices of the fused
  // qkv projection, gate and up of gate_up.
  LoraConfig lora;
};

// The projections of a LLaMA block that may take an adapter (models/common/lora.h).
std::vector<LoraTargetSpec> LlamaLoraTargets(const LlamaConfig& config);

Status ValidateLlamaConfig(const LlamaConfig& config);
StatusOr<std::unique_ptr<Model>> CreateLlama(const LlamaConfig& config, DType dtype);

}  // namespace strata
