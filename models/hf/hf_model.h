// Hugging Face model directories for strata's two families: config.json to and from
// ModelOptions (GPT-2 and the LLaMA family: llama, mistral, qwen2, qwen3; any other, or a field
// strata does not implement, is refused naming the field), and the map between Hugging Face's
// tensor names and strata's units (which rows of which unit tensor each Hugging Face tensor fills).
//
// Layout rules the map encodes:
//  - GPT-2's attention and MLP matrices are Conv1D, stored [in, out]: strata's [out, in] is
//    their transpose. Names may carry the "transformer." prefix (GPT2LMHeadModel) or not
//    (GPT2Model); the LM head is tied (no lm_head.weight).
//  - LLaMA's q_proj [H hs, C], k_proj and v_proj [KV hs, C] fill rows of strata's fused
//    attn.qkv.weight in that order (hs: config.json's head_dim, else C / H); gate_proj and up_proj
//    fill mlp.gate_up.weight. Hugging Face's q/k weights are already in the rotate-half layout
//    strata's rotary embedding uses. Qwen2's q/k/v biases fill attn.qkv.bias the same way
//    (model.qkv_bias; exported as model_type qwen2); Qwen3's q_norm and k_norm weights [hs]
//    are attn.q_norm / attn.k_norm (model.qk_norm; exported as model_type qwen3).
//  - Token embedding and LM head are [vocab, C] in Hugging Face and [padded_vocab, C] in
//    strata: rows [vocab, padded_vocab) are zero.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "core/status.h"
#include "core/unit_layout.h"
#include "models/hf/hf_special_tokens.h"

namespace strata {

// Reads `dir`/config.json. The result's preset is "hf:" + dir; padded_vocab is left 0
// (resolved by the model factory).
StatusOr<ModelOptions> ReadHfConfig(const std::string& dir);

// config.json text for a (resolved) model, with torch_dtype `dtype_name` ("float32",
// "bfloat16"), as transformers writes it (hf_json.h): rms_norm_eps, rope_theta and the
// rope scaling's factors, floats in strata, as their own shortest decimals (1e-06, not
// 9.999999974752427e-07). `tokens`' ids present (bos_token_id, eos_token_id, pad_token_id;
// a list stays a list) are written as they are; one absent is left out (transformers then
// takes its class's default).
std::string HfConfigJson(const ModelOptions& model, const std::string& dtype_name,
                         const HfSpecialTokens& tokens = {});

// One Hugging Face tensor and where it goes in strata.
struct HfTensor {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // its shape in the Hugging Face file
  int unit = 0, tensor = 0;    // strata destination (index into units / tensors)
  int64_t row_begin = 0;       // first destination row (rows of the tensor's first dim)
  bool transposed = false;     // GPT-2 Conv1D: the file holds the destination's transpose
};

// Every Hugging Face tensor of the (resolved) model, with the names as written by
// save_pretrained (GPT-2 with the "transformer." prefix), in unit order. `units` are the
// strata model's units.
StatusOr<std::vector<HfTensor>> HfTensorMap(const ModelOptions& model,
                                            const std::vector<UnitLayout>& units);

// The other names a file may use for `name` (GPT-2 without "transformer."), in the order
// to try after `name` itself.
std::vector<std::string> HfNameAliases(const std::string& name);

// A tensor a file may hold beside the model's own that must equal one of them: a tied
// model's "lm_head.weight" (GPT-2, whose head strata always ties to wte, and a LLaMA with
// tie_word_embeddings), which GPT2LMHeadModel's state_dict and some converters write though
// save_pretrained leaves it out. Returns the name of the tensor it copies, as HfTensorMap
// names it ("transformer.wte.weight", "model.embed_tokens.weight"); "" when `name` is no
// such copy for `model`.
std::string HfTiedCopyOf(const ModelOptions& model, const std::string& name);

}  // namespace strata
