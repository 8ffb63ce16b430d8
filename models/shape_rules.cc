// See shape_rules.h.
#include "models/shape_rules.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "core/rope.h"

namespace strata {
namespace {

template <typename T>
std::string NumberText(T value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return error == std::errc() ? std::string(buffer, end) : "?";
}

}  // namespace

std::vector<std::string> ModelShapeProblems(const ModelOptions& model) {
  std::vector<std::string> problems;
  auto expect = [&problems](bool ok, const char* key, const std::string& got,
                            const std::string& expected) {
    if (!ok) problems.push_back(absl::StrCat(key, ": got ", got, ", expected ", expected));
  };
  if (model.padded_vocab != 0) {
    expect(model.padded_vocab >= std::max(model.vocab, 1) && model.padded_vocab <= 1073741824,
           "model.padded_vocab", NumberText(model.padded_vocab),
           absl::StrCat("in [", std::max(model.vocab, 1), ", 1073741824] (or 0: model.vocab "
                        "rounded up to 64)"));
  }
  if (Status rope = CheckRopeSpec(model.rope); !rope.ok()) {
    problems.push_back(std::string(rope.message()));
  }
  if (model.heads >= 1 && model.channels >= 1 && model.head_dim == 0) {
    expect(model.channels % model.heads == 0, "model.channels", NumberText(model.channels),
           absl::StrCat("a multiple of model.heads (", model.heads,
                        ") where model.head_dim is 0 (the head size)"));
  }
  if (model.family == ModelFamily::kGpt) {
    expect(model.head_dim == 0 || model.head_dim * model.heads == model.channels, "model.head_dim",
           NumberText(model.head_dim),
           absl::StrCat("0 or model.channels / model.heads for model.family=gpt"));
    expect(model.kv_heads == 0 || model.kv_heads == model.heads, "model.kv_heads",
           NumberText(model.kv_heads),
           absl::StrCat("0 or model.heads (", model.heads,
                        ") for model.family=gpt (grouped-query attention is llama's)"));
    expect(model.ffn_hidden == 0 || model.ffn_hidden == 4 * model.channels, "model.ffn_hidden",
           NumberText(model.ffn_hidden),
           absl::StrCat("0 or 4 x model.channels (", 4 * model.channels,
                        ") for model.family=gpt"));
    expect(model.tie_embeddings, "model.tie_embeddings", "false",
           "true for model.family=gpt (GPT-2's LM head is its token embedding)");
    expect(model.sliding_window == 0, "model.sliding_window", NumberText(model.sliding_window),
           "0 for model.family=gpt");
    expect(!model.qkv_bias, "model.qkv_bias", "true",
           "false for model.family=gpt (GPT-2 has biases on every projection already)");
    expect(!model.qk_norm, "model.qk_norm", "true",
           "false for model.family=gpt (Qwen3's per-head norms are llama's)");
    expect(model.rope.scaling == RopeScaling::kNone, "model.rope_scaling",
           OptionName(model.rope.scaling),
           "none for model.family=gpt (it has no rotary embedding)");
  } else {
    if (model.kv_heads >= 1 && model.heads >= 1) {
      expect(model.heads % model.kv_heads == 0, "model.heads", NumberText(model.heads),
             absl::StrCat("a multiple of model.kv_heads (", model.kv_heads, ")"));
    }
    expect(!(model.qk_norm && model.qkv_bias), "model.qk_norm", "true with model.qkv_bias",
           "one of them (Qwen3 has q/k norms and no biases, Qwen2 biases and no norms; no "
           "architecture has both, so such a model could not be exported)");
    if (model.head_dim > 0) {
      expect(model.head_dim % 2 == 0, "model.head_dim", NumberText(model.head_dim),
             "even (rotary embeddings turn pairs of a head's channels)");
    } else if (model.heads >= 1 && model.channels >= 1 && model.channels % model.heads == 0) {
      expect((model.channels / model.heads) % 2 == 0, "model.channels",
             NumberText(model.channels),
             absl::StrCat("an even head size model.channels / model.heads (now ",
                          model.channels / model.heads, ") for rotary embeddings"));
    }
  }

  if (model.rope.scaling == RopeScaling::kDynamic) {  // so every sequence stays within it
    expect(model.max_seq_len <= model.rope.original_max_seq_len, "model.max_seq_len",
           NumberText(model.max_seq_len),
           absl::StrCat("<= model.rope_original_max_seq_len (", model.rope.original_max_seq_len,
                        "): a dynamic rotary scaling turns by the default frequencies only "
                        "within it, and strata does not raise them beyond"));
  }
  return problems;
}

}  // namespace strata
