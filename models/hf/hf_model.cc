// See hf_model.h.
#include "models/hf/hf_model.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/files.h"
#include "core/rope.h"
#include "core/strict_json.h"
#include "models/hf/hf_json.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// Reads config.json's field `key` as T into *out when present (and not null), strictly
// (core/strict_json.h): an integer field takes only a JSON integer within T's range, a
// boolean only true or false, a number never a boolean. Anything else is a problem naming
// the key and the value as written.
template <typename T>
bool Field(const Json& config, const char* key, T* out, std::vector<std::string>* problems) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return false;
  StatusOr<T> value = JsonAs<T>(*it);
  if (!value.ok()) {
    problems->push_back(absl::StrCat("field '", key, "' is ", value.status().message()));
    return false;
  }
  *out = *std::move(value);
  return true;
}

template <typename T>
void Required(const Json& config, const char* key, T* out, std::vector<std::string>* problems) {
  if (!config.contains(key) || config.at(key).is_null()) {
    problems->push_back(absl::StrCat("field '", key, "' is missing"));
    return;
  }
  Field(config, key, out, problems);
}

// A field that must hold `expected` (or be absent/null) for strata to compute the same model.
template <typename T>
void MustBe(const Json& config, const char* key, const T& expected, const std::string& why,
            std::vector<std::string>* problems) {
  T value{};
  if (!Field(config, key, &value, problems)) return;
  if (!(value == expected)) {
    problems->push_back(absl::StrCat("field '", key, "' is ", JsonShown(config.at(key)), ": ", why));
  }
}

void ReadGpt2(const Json& c, ModelOptions* m, std::vector<std::string>* problems) {
  m->family = ModelFamily::kGpt;
  Required(c, "n_layer", &m->layers, problems);
  Required(c, "n_head", &m->heads, problems);
  Required(c, "n_embd", &m->channels, problems);
  Required(c, "vocab_size", &m->vocab, problems);
  m->max_seq_len = 1024;
  Field(c, "n_ctx", &m->max_seq_len, problems);
  Field(c, "n_positions", &m->max_seq_len, problems);
  MustBe<std::string>(c, "activation_function", "gelu_new",
                      "strata's GPT uses GELU's tanh approximation (gelu_new)", problems);
  MustBe(c, "layer_norm_epsilon", 1e-5, "strata's layernorm uses 1e-5", problems);
  if (int n_inner = 0; Field(c, "n_inner", &n_inner, problems)) {
    if (n_inner != int64_t{4} * m->channels) {
      problems->push_back(
          absl::StrCat("field 'n_inner' is ", n_inner, ": strata's GPT has an MLP of 4 x n_embd"));
    }
  }
  MustBe(c, "tie_word_embeddings", true, "strata's GPT ties the LM head to wte", problems);
  MustBe(c, "scale_attn_weights", true, "strata scales attention by 1/sqrt(head size)", problems);
  MustBe(c, "scale_attn_by_inverse_layer_idx", false, "not implemented", problems);
  MustBe(c, "reorder_and_upcast_attn", false, "not implemented", problems);
  MustBe(c, "add_cross_attention", false, "strata's GPT is decoder-only", problems);
}

// config.json's rope_scaling (null: none): its rope_type (or the older key "type") "default",
// "linear" {factor}, "llama3" {factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings} or "dynamic" {factor}, whose original context is the
// config's max_position_embeddings (`max_pos`); any other type is refused, naming it.
void ReadRopeScaling(const Json& c, int max_pos, RopeSpec* rope,
                     std::vector<std::string>* problems) {
  auto it = c.find("rope_scaling");
  if (it == c.end() || it->is_null()) return;
  const Json& scaling = *it;
  const std::string type_key =
      scaling.is_object() && scaling.contains("rope_type") ? "rope_type" : "type";
  if (!scaling.is_object() || !scaling.contains(type_key) || !scaling.at(type_key).is_string()) {
    problems->push_back(absl::StrCat("field 'rope_scaling' is ", scaling.dump(),
                                     ": expected null or an object with a string rope_type"));
    return;
  }
  const std::string type = scaling.at(type_key).get<std::string>();
  auto required = [&](const char* key, auto* out) {
    if (!scaling.contains(key) || scaling.at(key).is_null()) {
      problems->push_back(
          absl::StrCat("field 'rope_scaling' (", type, ") lacks the number '", key, "'"));
      return;
    }
    auto value = JsonAs<std::remove_pointer_t<decltype(out)>>(scaling.at(key));
    if (!value.ok()) {
      problems->push_back(absl::StrCat("field 'rope_scaling' (", type, "): '", key, "' is ",
                                       value.status().message()));
      return;
    }
    *out = *value;
  };
  if (type == "default") return;
  if (type == "linear") {
    rope->scaling = RopeScaling::kLinear;
    required("factor", &rope->factor);
  } else if (type == "llama3") {
    rope->scaling = RopeScaling::kLlama3;
    required("factor", &rope->factor);
    required("low_freq_factor", &rope->low_freq_factor);
    required("high_freq_factor", &rope->high_freq_factor);
    required("original_max_position_embeddings", &rope->original_max_seq_len);
  } else if (type == "dynamic") {
    rope->scaling = RopeScaling::kDynamic;
    required("factor", &rope->factor);
    rope->original_max_seq_len = max_pos;
  } else {
    problems->push_back(absl::StrCat("field 'rope_scaling' has ", type_key, " \"", type,
                                     "\": strata implements the default, \"linear\", "
                                     "\"llama3\" and \"dynamic\" rotary scalings"));
    return;
  }
  if (Status valid = CheckRopeSpec(*rope); !valid.ok()) {
    problems->push_back(
        absl::StrCat("field 'rope_scaling' is ", scaling.dump(), ": ", valid.message()));
  }
}

// The inverse of ReadRopeScaling (each factor as its own shortest decimal: JsonNumber).
Json RopeScalingJson(const RopeSpec& rope) {
  switch (rope.scaling) {
    case RopeScaling::kNone:
      return nullptr;
    case RopeScaling::kLinear:
      return {{"rope_type", "linear"}, {"factor", JsonNumber(rope.factor)}};
    case RopeScaling::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", JsonNumber(rope.factor)},
              {"low_freq_factor", JsonNumber(rope.low_freq_factor)},
              {"high_freq_factor", JsonNumber(rope.high_freq_factor)},
              {"original_max_position_embeddings", rope.original_max_seq_len}};
    case RopeScaling::kDynamic:
      return {{"rope_type", "dynamic"}, {"factor", JsonNumber(rope.factor)}};
  }
  return nullptr;
}

void ReadLlama(const Json& c, ModelOptions* m, std::vector<std::string>* problems) {
  m->family = ModelFamily::kLlama;
  Required(c, "num_hidden_layers", &m->layers, problems);
  Required(c, "num_attention_heads", &m->heads, problems);
  Required(c, "hidden_size", &m->channels, problems);
  Required(c, "intermediate_size", &m->ffn_hidden, problems);
  Required(c, "vocab_size", &m->vocab, problems);
  m->kv_heads = m->heads;
  Field(c, "num_key_value_heads", &m->kv_heads, problems);
  m->max_seq_len = 2048;
  Field(c, "max_position_embeddings", &m->max_seq_len, problems);
  m->rope = RopeSpec{};
  Field(c, "rope_theta", &m->rope.theta, problems);
  ReadRopeScaling(c, m->max_seq_len, &m->rope, problems);
  m->norm_eps = 1e-6f;
  Field(c, "rms_norm_eps", &m->norm_eps, problems);
  m->tie_embeddings = false;
  Field(c, "tie_word_embeddings", &m->tie_embeddings, problems);
  MustBe<std::string>(c, "hidden_act", "silu", "strata's LLaMA MLP is SwiGLU (silu)", problems);
  MustBe(c, "attention_bias", false, "strata's LLaMA attention has no biases", problems);
  MustBe(c, "mlp_bias", false, "strata's LLaMA MLP has no biases", problems);
  // Each head's width: head_dim where given (Mistral Nemo, Qwen3 set it apart from
  // hidden_size / num_attention_heads, which transformers takes otherwise).
  m->head_dim = 0;
  if (c.contains("head_dim") && !c.at("head_dim").is_null()) {
    if (!Field(c, "head_dim", &m->head_dim, problems)) {
      m->head_dim = 0;
    } else if (m->head_dim < 2 || m->head_dim % 2 != 0) {
      problems->push_back(absl::StrCat("field 'head_dim' is ", m->head_dim,
                                       ": expected an even width >= 2 (rotary embeddings)"));
    } else if (m->heads > 0 && int64_t{m->head_dim} * m->heads == m->channels) {
      m->head_dim = 0;  // the default: hidden_size / num_attention_heads
    }
  } else if (m->heads > 0 && m->channels % m->heads != 0) {
    problems->push_back(absl::StrCat("field 'hidden_size' (", m->channels,
                                     ") is not a multiple of 'num_attention_heads' (", m->heads,
                                     ") and there is no 'head_dim'"));
  }
  bool sliding = true;  // LLaMA and Mistral: a sliding_window given is used
  Field(c, "use_sliding_window", &sliding, problems);  // Qwen2's switch
  if (int window = 0; sliding && Field(c, "sliding_window", &window, problems)) {
    // A window shorter than the context is kept: strata's full causal attention equals it
    // for sequences within it, which the option checks hold train.seq_len to.
    if (window < 1) {
      problems->push_back(absl::StrCat("field 'sliding_window' is ", window, ": expected >= 1"));
    } else if (window < m->max_seq_len) {
      m->sliding_window = window;
    }
  }
}

}  // namespace

StatusOr<ModelOptions> ReadHfConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  StatusOr<std::string> text = ReadInputFile(path, "config.json", kJsonInputLimit);
  if (!text.ok() && text.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat(
        "model.from=hf:", dir, ": ", path,
        " not found (a Hugging Face model directory holds config.json and model.safetensors)"));
  }
  if (!text.ok()) return Annotate(text.status(), absl::StrCat("model.from=hf:", dir));
  // Strictly: a key twice is refused (nlohmann would keep the last one silently).
  Json config;
  if (const std::string problem = ParseJsonStrict(*text, &config); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " ", problem));
  }
  if (!config.is_object()) return absl::InvalidArgumentError(path + " is not a JSON object");
  std::string model_type;
  if (config.contains("model_type") && config.at("model_type").is_string()) {
    model_type = config.at("model_type").get<std::string>();
  }
  // A pre-quantized checkpoint (bitsandbytes' *-bnb-4bit, GPTQ, AWQ, ...) holds codes and
  // scales in layouts of its library's own, which strata does not read: it quantizes an
  // F32/BF16/F16 base itself (lora.base_dtype).
  if (config.contains("quantization_config")) {
    const Json& q = config.at("quantization_config");
    std::string found;
    if (q.is_object()) {
      for (const char* key : {"quant_method", "bnb_4bit_quant_type", "load_in_4bit",
                              "load_in_8bit", "bits"}) {
        if (q.contains(key)) {
          absl::StrAppend(&found, found.empty() ? "" : ", ", key, " ", q.at(key).dump());
        }
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path, " describes a pre-quantized checkpoint (quantization_config: ",
        found.empty() ? q.dump() : found,
        "): strata reads F32, BF16 or F16 weights and quantizes a frozen LoRA base itself: "
        "use the unquantized model's directory with lora.base_dtype=nf4 (or int8)"));
  }
  ModelOptions model;
  model.preset = "hf:" + dir;
  std::vector<std::string> problems;
  if (model_type == "gpt2") {
    ReadGpt2(config, &model, &problems);
  } else if (model_type == "llama" || model_type == "mistral") {
    ReadLlama(config, &model, &problems);
  } else if (model_type == "qwen2") {
    // LLaMA's shape with a bias on the q, k and v projections (none on o_proj).
    ReadLlama(config, &model, &problems);
    model.qkv_bias = true;
  } else if (model_type == "qwen3") {
    // LLaMA's shape with an RMSNorm of each q and k head (q_norm, k_norm) before the
    // rotation; attention_bias false as in LLaMA's config.
    ReadLlama(config, &model, &problems);
    model.qk_norm = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": field 'model_type' is ",
        config.contains("model_type") ? config.at("model_type").dump() : std::string("missing"),
        ": strata reads \"gpt2\" and the LLaMA family (\"llama\", \"mistral\", \"qwen2\", "
        "\"qwen3\")"));
  }
  if (!problems.empty()) {
    std::string message =
        absl::StrCat(path, " (", model_type, ") describes a model strata cannot load:");
    for (const std::string& p : problems) absl::StrAppend(&message, "\n  ", p);
    return absl::InvalidArgumentError(message);
  }
  return model;
}

std::string HfConfigJson(const ModelOptions& m, const std::string& dtype_name,
                         const HfSpecialTokens& tokens) {
  Json c;
  if (m.family == ModelFamily::kGpt) {
    c = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"activation_function", "gelu_new"},
         {"n_layer", m.layers},
         {"n_head", m.heads},
         {"n_embd", m.channels},
         {"n_inner", nullptr},
         {"vocab_size", m.vocab},
         {"n_positions", m.max_seq_len},
         {"n_ctx", m.max_seq_len},
         {"layer_norm_epsilon", 1e-5},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", true},
         {"torch_dtype", dtype_name}};
  } else {
    c = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"hidden_act", "silu"},
         {"num_hidden_layers", m.layers},
         {"num_attention_heads", m.heads},
         {"num_key_value_heads", m.kv_heads},
         {"head_dim", m.head_dim > 0 ? m.head_dim : m.channels / m.heads},
         {"hidden_size", m.channels},
         {"intermediate_size", m.ffn_hidden},
         {"vocab_size", m.vocab},
         {"max_position_embeddings", m.max_seq_len},
         {"rope_theta", JsonNumber(m.rope.theta)},
         {"rms_norm_eps", JsonNumber(m.norm_eps)},
         {"tie_word_embeddings", m.tie_embeddings},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"rope_scaling", RopeScalingJson(m.rope)},
         {"torch_dtype", dtype_name}};
    if (m.rope.scaling == RopeScaling::kDynamic) {  // its original context: max_position
      c["max_position_embeddings"] = m.rope.original_max_seq_len;
    }
    if (m.qkv_bias || m.sliding_window > 0) {  // Qwen2 or Mistral: no bias switches
      c.erase("attention_bias");
      c.erase("mlp_bias");
    }
    if (m.qk_norm) {  // Qwen3: its q/k norms are not a config field
      c["architectures"] = {"Qwen3ForCausalLM"};
      c["model_type"] = "qwen3";
      c["attention_bias"] = false;
      c["use_sliding_window"] = m.sliding_window > 0;
      c["sliding_window"] = m.sliding_window > 0 ? Json(m.sliding_window) : Json(nullptr);
    } else if (m.qkv_bias) {  // Qwen2: its q, k, v biases are not a config field
      c["architectures"] = {"Qwen2ForCausalLM"};
      c["model_type"] = "qwen2";
      c["use_sliding_window"] = m.sliding_window > 0;
      c["sliding_window"] = m.sliding_window > 0 ? Json(m.sliding_window) : Json(nullptr);
    } else if (m.sliding_window > 0) {  // Mistral: LLaMA's shape with a window
      c["architectures"] = {"MistralForCausalLM"};
      c["model_type"] = "mistral";
      c["sliding_window"] = m.sliding_window;
    }
  }
  c.update(tokens.ToJson());
  return HfJsonText(c);
}

StatusOr<std::vector<HfTensor>> HfTensorMap(const ModelOptions& m,
                                            const std::vector<UnitLayout>& units) {
  std::vector<HfTensor> out;
  // Finds strata tensor `name` of unit `unit`; -1 if absent.
  auto index_of = [&units](int unit, const std::string& name) {
    const auto& tensors = units[unit].tensors();
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (tensors[t].name == name) return static_cast<int>(t);
    }
    return -1;
  };
  Status status = absl::OkStatus();
  auto add = [&](const std::string& hf_name, std::vector<int64_t> shape, int unit,
                 const std::string& tensor, int64_t row_begin = 0, bool transposed = false) {
    const int t = index_of(unit, tensor);
    if (t < 0 && status.ok()) {
      status = absl::InternalError(absl::StrCat("unit '", units[unit].name(), "' has no tensor '",
                                                tensor, "' for ", hf_name));
    }
    out.push_back({hf_name, std::move(shape), unit, t, row_begin, transposed});
  };
  const int64_t C = m.channels, V = m.vocab, L = m.layers;
  if (m.family == ModelFamily::kGpt) {
    const std::string p = "transformer.";
    add(p + "wte.weight", {V, C}, 0, "wte");
    add(p + "wpe.weight", {m.max_seq_len, C}, 0, "wpe");
    for (int64_t l = 0; l < L; ++l) {
      const int u = static_cast<int>(l) + 1;
      const std::string h = absl::StrCat(p, "h.", l, ".");
      add(h + "ln_1.weight", {C}, u, "ln1.weight");
      add(h + "ln_1.bias", {C}, u, "ln1.bias");
      add(h + "attn.c_attn.weight", {C, 3 * C}, u, "attn.qkv.weight", 0, true);
      add(h + "attn.c_attn.bias", {3 * C}, u, "attn.qkv.bias");
      add(h + "attn.c_proj.weight", {C, C}, u, "attn.proj.weight", 0, true);
      add(h + "attn.c_proj.bias", {C}, u, "attn.proj.bias");
      add(h + "ln_2.weight", {C}, u, "ln2.weight");
      add(h + "ln_2.bias", {C}, u, "ln2.bias");
      add(h + "mlp.c_fc.weight", {C, 4 * C}, u, "mlp.fc.weight", 0, true);
      add(h + "mlp.c_fc.bias", {4 * C}, u, "mlp.fc.bias");
      add(h + "mlp.c_proj.weight", {4 * C, C}, u, "mlp.proj.weight", 0, true);
      add(h + "mlp.c_proj.bias", {C}, u, "mlp.proj.bias");
    }
    add(p + "ln_f.weight", {C}, static_cast<int>(L) + 1, "lnf.weight");
    add(p + "ln_f.bias", {C}, static_cast<int>(L) + 1, "lnf.bias");
  } else {
    const int64_t hs = m.head_dim > 0 ? m.head_dim : C / m.heads;
    const int64_t Q = m.heads * hs, KV = m.kv_heads * hs, F = m.ffn_hidden;
    add("model.embed_tokens.weight", {V, C}, 0, "tok_embeddings");
    for (int64_t l = 0; l < L; ++l) {
      const int u = static_cast<int>(l) + 1;
      const std::string h = absl::StrCat("model.layers.", l, ".");
      add(h + "input_layernorm.weight", {C}, u, "attn_norm.weight");
      add(h + "self_attn.q_proj.weight", {Q, C}, u, "attn.qkv.weight", 0);
      add(h + "self_attn.k_proj.weight", {KV, C}, u, "attn.qkv.weight", Q);
      add(h + "self_attn.v_proj.weight", {KV, C}, u, "attn.qkv.weight", Q + KV);
      add(h + "self_attn.o_proj.weight", {C, Q}, u, "attn.proj.weight");
      if (m.qkv_bias) {
        add(h + "self_attn.q_proj.bias", {Q}, u, "attn.qkv.bias", 0);
        add(h + "self_attn.k_proj.bias", {KV}, u, "attn.qkv.bias", Q);
        add(h + "self_attn.v_proj.bias", {KV}, u, "attn.qkv.bias", Q + KV);
      }
      if (m.qk_norm) {
        add(h + "self_attn.q_norm.weight", {hs}, u, "attn.q_norm.weight");
        add(h + "self_attn.k_norm.weight", {hs}, u, "attn.k_norm.weight");
      }
      add(h + "post_attention_layernorm.weight", {C}, u, "mlp_norm.weight");
      add(h + "mlp.gate_proj.weight", {F, C}, u, "mlp.gate_up.weight", 0);
      add(h + "mlp.up_proj.weight", {F, C}, u, "mlp.gate_up.weight", F);
      add(h + "mlp.down_proj.weight", {C, F}, u, "mlp.down.weight");
    }
    add("model.norm.weight", {C}, static_cast<int>(L) + 1, "norm.weight");
    if (!m.tie_embeddings) add("lm_head.weight", {V, C}, static_cast<int>(L) + 2, "lm_head.weight");
  }
  RETURN_IF_ERROR(status);
  return out;
}

std::vector<std::string> HfNameAliases(const std::string& name) {
  if (absl::StartsWith(name, "transformer.")) return {name.substr(12)};
  return {};
}

std::string HfTiedCopyOf(const ModelOptions& m, const std::string& name) {
  if (name != "lm_head.weight") return "";
  if (m.family == ModelFamily::kGpt) return "transformer.wte.weight";
  return m.tie_embeddings ? "model.embed_tokens.weight" : "";
}

}  // namespace strata
