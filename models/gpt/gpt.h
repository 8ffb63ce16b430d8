// A GPT-2-style decoder expressed as units and stages for the runtime (runtime/model.h):
// units = [embedding (wte, wpe), block 0..L-1, final norm]; stages = [embed, block 0..L-1,
// final_norm, lm_head], where lm_head reuses the embedding unit (tied weights), so the
// access trace has the embedding at both ends of the forward. Pre-norm blocks of causal
// multi-head attention and a GELU MLP; GPT-2's initialisation (std 0.02, residual
// projections scaled by 1/sqrt(2L)).
// Activations live on the device tier, allocated by PrepareActivations; the training
// forward of lm_head also computes the logits' gradient in place (fused cross-entropy).
// Thread-safety: as Model.
#pragma once

#include <memory>

#include "models/common/lora.h"
#include "runtime/model.h"

namespace strata {

struct GptConfig {
  int layers = 4;
  int heads = 4;
  int channels = 256;
  int vocab = 50304;         // real vocabulary: token ids and the softmax's classes
  int padded_vocab = 50304;  // rows of wte (>= vocab; the extra rows stay zero)
  int max_seq_len = 256;
  // Activation recompute (train.recompute=blocks): each block keeps only its output; its
  // backward runs its forward again into one shared set of buffers first. Same values,
  // one more block forward (less its last projection) per backward, block activations of
  // one block instead of L.
  bool recompute = false;
  // Low-rank adapters (lora.*): rank 0 = none. Targets: attn.qkv (c_attn), attn.proj
  // (c_proj), mlp.fc (c_fc), mlp.proj (c_proj); default attn.qkv.
  LoraConfig lora;
};

// The projections of a GPT block that may take an adapter (models/common/lora.h).
std::vector<LoraTargetSpec> GptLoraTargets(const GptConfig& config);

Status ValidateGptConfig(const GptConfig& config);
StatusOr<std::unique_ptr<Model>> CreateGpt(const GptConfig& config, DType dtype);

}  // namespace strata
