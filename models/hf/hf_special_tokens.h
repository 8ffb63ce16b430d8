// The special-token ids of a Hugging Face model, which generation needs to start, pad and
// stop: config.json's (and generation_config.json's) bos_token_id, eos_token_id and
// pad_token_id. Each is absent, one id, or a list of ids, and is kept as the source wrote
// it: Llama 3 instruct's eos_token_id is [128001, 128009] (<|end_of_text|> and <|eot_id|>),
// and transformers' generate() stops at any of them, so a fine-tuned chat model exported
// with only the first would run on past its end of turn. Where no config says them, a
// tokenizer's own special tokens give them (tokenizer_config.json's bos_token, eos_token
// and pad_token; GPT-2's <|endoftext|>).
// Thread-safety: plain values and pure functions of the files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata {

struct HfSpecialTokens {
  // Each null where absent, else a non-negative integer or a non-empty array of them.
  nlohmann::json bos_token_id, eos_token_id, pad_token_id;

  bool empty() const;
  // {"bos_token_id": ..., "eos_token_id": ..., "pad_token_id": ...}: the keys present.
  nlohmann::json ToJson() const;
  // "bos_token_id 1, eos_token_id [128001, 128009]" (the keys present), or "none".
  std::string Describe() const;
};

// The keys of a JSON object (a config.json, a generation_config.json, a checkpoint's record
// of them): each valid one taken; a null one is absent; one of another kind (a string, a
// negative or fractional id, an empty list) is a problem naming `where` and the key.
HfSpecialTokens SpecialTokensOf(const nlohmann::json& object, const std::string& where,
                                std::vector<std::string>* problems);

// `dir`/config.json's. kNotFound without one; kInvalidArgument, naming the file, when it is
// not a JSON object or a key is of another kind.
StatusOr<HfSpecialTokens> ReadHfSpecialTokens(const std::string& dir);

// From a tokenizer's files, each (its path, the name Hugging Face gives it) as
// TokenizerFiles lists them: tokenizer_config.json's bos_token, eos_token and pad_token (a
// string, or an object with its "content"), each id from its added_tokens_decoder, else
// tokenizer.json's added_tokens or its model's vocabulary, else vocab.json; without
// tokenizer_config.json, GPT-2's vocab.json: <|endoftext|> as bos and eos (GPT2Tokenizer's
// defaults). A token the files do not map to an id is left out; none for other files (a
// SentencePiece model alone). An unreadable or malformed file is an error naming it.
StatusOr<HfSpecialTokens> TokenizerSpecialTokens(
    const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace strata
