// The one place a Model is made from options: picks the family (models/gpt, models/llama),
// resolves the keys whose 0 means "the family's default" and validates the shape.
// Thread-safety: plain functions.
#pragma once

#include <memory>

#include "core/options.h"
#include "models/llama/llama.h"
#include "runtime/model.h"

namespace strata {

// `model` with kv_heads, head_dim, ffn_hidden and padded_vocab resolved (0 = the family's
// default: heads; channels / heads; 4C for gpt, 8C/3 rounded up to a multiple of 64 for llama;
// vocab rounded up to a multiple of 64). Everything that records or compares a model's shape uses
// these values.
ModelOptions ResolveModelOptions(const ModelOptions& model);

// The LLaMA configuration of a llama-family `model` (resolved here), without recompute or
// LoRA.
LlamaConfig LlamaConfigOf(const ModelOptions& model);

// The model of `model` (resolved here), computing in `dtype`, with activation recompute of
// the blocks when `recompute` is kBlocks, and with `lora` (rank > 0) its base frozen and
// low-rank adapters added (models/common/lora.h).
StatusOr<std::unique_ptr<Model>> CreateModel(const ModelOptions& model, Recompute recompute,
                                             DType dtype, const LoraOptions& lora = {});

}  // namespace strata
