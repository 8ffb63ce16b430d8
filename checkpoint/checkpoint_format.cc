// checkpoint.json's vocabulary: see checkpoint_format.h.
#include "checkpoint/checkpoint_format.h"

#include <xxhash.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_files.h"
#include "models/create_model.h"  // ResolveModelOptions

namespace strata {
namespace checkpoint_internal {
namespace {

// The model's "rope_scaling": null for none, the factors as text.
nlohmann::json RopeScalingJson(const RopeSpec& rope) {
  if (rope.scaling == RopeScaling::kNone) return nullptr;
  nlohmann::json out = {{"type", OptionName(rope.scaling)}, {"factor", absl::StrCat(rope.factor)}};
  if (rope.scaling == RopeScaling::kLlama3) {
    out["low_freq_factor"] = absl::StrCat(rope.low_freq_factor);
    out["high_freq_factor"] = absl::StrCat(rope.high_freq_factor);
  }
  if (rope.scaling == RopeScaling::kLlama3 || rope.scaling == RopeScaling::kDynamic) {
    out["original_max_seq_len"] = rope.original_max_seq_len;
  }
  return out;
}

// What a checkpoint written before a key existed stands for (only GPTs were written then):
// the key's value in a GPT of the stored shape.
nlohmann::json ModelKeyBeforeItExisted(const std::string& key, const nlohmann::json& stored) {
  if (key == "family") return "gpt";
  if (key == "kv_heads") return stored.value("heads", -1);
  if (key == "head_dim") {
    const int heads = stored.value("heads", 0);
    return heads > 0 ? stored.value("channels", -1) / heads : -1;
  }
  if (key == "ffn_hidden") return 4 * stored.value("channels", -1);
  if (key == "padded_vocab") return stored.value("vocab", -1);
  if (key == "tie_embeddings") return true;
  if (key == "qkv_bias") return false;
  if (key == "qk_norm") return false;
  if (key == "sliding_window") return 0;
  // rope_theta, norm_eps: a GPT does not use them; equal to any GPT's. rope_scaling: none.
  return nullptr;
}

}  // namespace

nlohmann::json ModelJson(const ModelOptions& options) {
  const ModelOptions model = ResolveModelOptions(options);
  return {{"family", OptionName(model.family)},
          {"layers", model.layers},
          {"heads", model.heads},
          {"kv_heads", model.kv_heads},
          {"head_dim", model.head_dim},
          {"channels", model.channels},
          {"ffn_hidden", model.ffn_hidden},
          {"vocab", model.vocab},
          {"padded_vocab", model.padded_vocab},
          {"max_seq_len", model.max_seq_len},
          {"rope_theta", absl::StrCat(model.rope.theta)},
          {"norm_eps", absl::StrCat(model.norm_eps)},
          {"rope_scaling", RopeScalingJson(model.rope)},
          {"qkv_bias", model.qkv_bias},
          {"qk_norm", model.qk_norm},
          {"sliding_window", model.sliding_window},
          {"tie_embeddings", model.tie_embeddings}};
}

nlohmann::json StoredModelKey(const nlohmann::json& stored, const std::string& key) {
  return stored.contains(key) ? stored.at(key) : ModelKeyBeforeItExisted(key, stored);
}

nlohmann::json ArrayJson(int k, const QuantizedBlocks& blocks, size_t used, nlohmann::json shards) {
  if (k == 0 || blocks.empty()) {
    // fp32: no blocks, no scales.
    return {{"name", kArrayNames[k]},
            {"dtype", "f32"},
            {"block", 0},
            {"scales", nullptr},
            {"shards", std::move(shards)}};
  }
  // The fp32 ranges among the blocks of the used elements.
  nlohmann::json fp32_blocks = nlohmann::json::array();
  const size_t count = (used + kAdamStateBlock - 1) / kAdamStateBlock;
  for (const auto& [first, end] : blocks.fp32) {
    if (first < std::min(end, count)) fp32_blocks.push_back({first, std::min(end, count)});
  }
  return {{"name", kArrayNames[k]},
          {"dtype", kMomentDTypes[k]},
          {"block", kAdamStateBlock},
          {"scales", "f32"},
          {"fp32_blocks", std::move(fp32_blocks)},
          {"shards", std::move(shards)}};
}

std::string MetaChecksum(nlohmann::json meta) {
  meta.erase("checksum");
  const std::string text = meta.dump();
  return Hex(XXH3_64bits(text.data(), text.size()));
}

std::string LoraTargetsOf(const Model& model) {
  std::vector<std::string> targets;
  for (const UnitLayout& unit : model.units()) {
    if (!unit.trainable()) continue;
    for (const TensorSpec& tensor : unit.tensors()) {
      if (absl::EndsWith(tensor.name, ".lora_A")) {
        targets.push_back(tensor.name.substr(0, tensor.name.size() - 7));
      }
    }
    break;
  }
  return absl::StrJoin(targets, ",");
}

}  // namespace checkpoint_internal
}  // namespace strata
