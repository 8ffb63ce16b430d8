// checkpoint.json's vocabulary (internal: in the library's srcs, so nothing outside
// checkpoint/ can include it): the format name and versions, the model's shape as the file
// records it (and what a key an older version lacked stood for), the metadata's checksum,
// the LoRA targets a checkpoint names. The writer (checkpoint_write) and the reader
// (checkpoint_open) share these, so that what one writes the other reads back exactly.
// See checkpoint.h for the layout.
// Thread-safety: pure functions and constants.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/checkpoint_layout.h"
#include "core/options.h"
#include "runtime/model.h"

namespace strata {
namespace checkpoint_internal {

inline constexpr const char* kFormat = "strata-checkpoint";
// 2: checkpoint.json carries "checksum", the XXH3 of its own other fields; 1 (without it)
// still loads. 3: "units" are the trainable units only, and a LoRA run's checkpoint has
// "lora" {rank, alpha, targets} and "base" {from, seed, xxh3}. 4: "model" has
// "rope_scaling", "qkv_bias" and "sliding_window" (absent before: none, false, 0). 5:
// "model" has "head_dim" and "qk_norm" (absent before: channels / heads, false). 6: one file
// per rank (checkpoint_layout.h) instead of one per unit: "world", "files" [{rank, name,
// host, bytes, xxh3}], and per unit "arrays" [{name, dtype, block, scales, shards: [{rank,
// begin, end, offset}]}] (dtype "f32", block 0 and scales null: the fields a quantized
// array will fill); checkpoint.json is written last, after every rank's file is durable.
// 7: a LoRA run's "base" has "base_dtype" (train, bf16, int8, nf4: lora.base_dtype; absent
// before: train) and, where it is not train, "xxh3" hashes the quantized units' stored bytes.
// 8: with 8-bit Adam states (train.optimizer_states = int8) each unit's exp_avg and
// exp_avg_sq are in their stored form (checkpoint_layout.h): "dtype" q8-dynamic-signed /
// q8-dynamic-unsigned, "block" 2048, "scales" "f32", "fp32_blocks" [[first, end), ...] (the
// unit's blocks, among those of its used elements, whose moments are fp32); with fp32
// states the same as 7.
inline constexpr int kVersion = 8;
inline constexpr int kOldestVersion = 1;

// The directory inside a checkpoint that holds its tokenizer's files.
inline constexpr char kTokenizerDir[] = "tokenizer";
// The directory inside a checkpoint that holds the copy of its model source's
// generation_config.json (checkpoint_source.h).
inline constexpr char kSourceDir[] = "source";
inline constexpr char kGenerationConfig[] = "generation_config.json";

// The model's shape (resolved: no "0 = default" values), as checkpoint.json records it.
// rope_theta, norm_eps and the rope scaling's factors are written as text (shortest round
// trip) so that they compare exactly; rope_scaling is null for none.
nlohmann::json ModelJson(const ModelOptions& options);

// Key `key` of a checkpoint's "model" object, or what it stood for before it existed (only
// GPTs were written then: the key's value in a GPT of the stored shape; null for
// rope_theta, norm_eps and rope_scaling).
nlohmann::json StoredModelKey(const nlohmann::json& stored, const std::string& key);

// A unit's array `k` (0 master, 1 exp_avg, 2 exp_avg_sq) as the manifest lists it, with
// its shards: f32, or an 8-bit moment whose blocks over the unit's `used` elements are
// `blocks` (non-empty: its dtype, block, scales and fp32_blocks).
nlohmann::json ArrayJson(int k, const QuantizedBlocks& blocks, size_t used, nlohmann::json shards);

// XXH3 of the metadata without its "checksum" field, over its compact dump (keys sorted).
std::string MetaChecksum(nlohmann::json meta);

// The adapters' targets (strata names, in layout order) from the first trainable unit's
// "<target>.lora_A" tensors.
std::string LoraTargetsOf(const Model& model);

}  // namespace checkpoint_internal
}  // namespace strata
