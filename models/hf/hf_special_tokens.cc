// See hf_special_tokens.h.
#include "models/hf/hf_special_tokens.h"

#include <cstdint>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "absl/strings/str_join.h"
#include "core/files.h"
#include "core/strict_json.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// A JSON integer (core/strict_json.h: not 2.0, not true) that can be an id of a model:
// in [0, 2^31 - 1].
bool IsId(const Json& value) {
  const StatusOr<int32_t> id = JsonInteger<int32_t>(value);
  return id.ok() && *id >= 0;
}

// An id or a non-empty list of ids.
bool IsIds(const Json& value) {
  if (IsId(value)) return true;
  if (!value.is_array() || value.empty()) return false;
  for (const Json& id : value) {
    if (!IsId(id)) return false;
  }
  return true;
}

// Each key with its member.
std::vector<std::pair<const char*, Json*>> Slots(HfSpecialTokens* tokens) {
  return {{"bos_token_id", &tokens->bos_token_id},
          {"eos_token_id", &tokens->eos_token_id},
          {"pad_token_id", &tokens->pad_token_id}};
}

StatusOr<Json> ReadJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "model file", kJsonInputLimit));
  // Strictly: a key twice is refused (nlohmann would keep the last id silently).
  Json json;
  if (const std::string problem = ParseJsonStrict(text, &json); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " ", problem));
  }
  return json;
}

// A special token as tokenizer_config.json states it: "<|eot_id|>" or {"content": ...}.
std::optional<std::string> TokenText(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

bool HfSpecialTokens::empty() const {
  return bos_token_id.is_null() && eos_token_id.is_null() && pad_token_id.is_null();
}

Json HfSpecialTokens::ToJson() const {
  Json out = Json::object();
  HfSpecialTokens copy = *this;
  for (const auto& [key, value] : Slots(&copy)) {
    if (!value->is_null()) out[key] = *value;
  }
  return out;
}

std::string HfSpecialTokens::Describe() const {
  std::vector<std::string> parts;
  const Json json = ToJson();  // items() refers to it: it must outlive the loop
  for (const auto& [key, value] : json.items()) {
    std::string text = value.dump();
    if (value.is_array()) {
      text = absl::StrCat("[", absl::StrJoin(value.get<std::vector<int64_t>>(), ", "), "]");
    }
    parts.push_back(absl::StrCat(key, " ", text));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

HfSpecialTokens SpecialTokensOf(const Json& object, const std::string& where,
                                std::vector<std::string>* problems) {
  HfSpecialTokens tokens;
  if (!object.is_object()) return tokens;
  for (const auto& [key, slot] : Slots(&tokens)) {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) continue;
    if (!IsIds(*it)) {
      problems->push_back(absl::StrCat(where, ": field '", key, "' is ", it->dump(),
                                       ": expected a token id or a list of them"));
      continue;
    }
    *slot = *it;
  }
  return tokens;
}

StatusOr<HfSpecialTokens> ReadHfSpecialTokens(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ASSIGN_OR_RETURN(const Json config, ReadJson(path));
  if (!config.is_object()) return absl::InvalidArgumentError(path + " is not a JSON object");
  std::vector<std::string> problems;
  HfSpecialTokens tokens = SpecialTokensOf(config, path, &problems);
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  return tokens;
}

StatusOr<HfSpecialTokens> TokenizerSpecialTokens(
    const std::vector<std::pair<std::string, std::string>>& files) {
  std::map<std::string, std::string> by_name;  // Hugging Face name -> path
  for (const auto& [path, name] : files) by_name[name] = path;
  // Token text -> id, from every file that maps them (the first to name a text wins).
  std::map<std::string, int64_t> ids;
  auto add = [&ids](const std::string& text, const Json& id) {
    if (IsId(id)) ids.emplace(text, id.get<int64_t>());
  };
  Json tokenizer_config;
  if (by_name.count("tokenizer_config.json")) {
    ASSIGN_OR_RETURN(tokenizer_config, ReadJson(by_name["tokenizer_config.json"]));
    if (tokenizer_config.contains("added_tokens_decoder") &&
        tokenizer_config.at("added_tokens_decoder").is_object()) {
      for (const auto& [id, token] : tokenizer_config.at("added_tokens_decoder").items()) {
        const std::optional<std::string> text = TokenText(token);
        int64_t value = -1;
        if (text && absl::SimpleAtoi(id, &value)) add(*text, Json(value));
      }
    }
  }
  if (by_name.count("tokenizer.json")) {
    ASSIGN_OR_RETURN(const Json tokenizer, ReadJson(by_name["tokenizer.json"]));
    if (tokenizer.contains("added_tokens") && tokenizer.at("added_tokens").is_array()) {
      for (const Json& token : tokenizer.at("added_tokens")) {
        const std::optional<std::string> text = TokenText(token);
        if (text && token.contains("id")) add(*text, token.at("id"));
      }
    }
    const Json* vocab = nullptr;
    if (tokenizer.contains("model") && tokenizer.at("model").contains("vocab")) {
      vocab = &tokenizer.at("model").at("vocab");
    }
    if (vocab != nullptr && vocab->is_object()) {
      for (const auto& [text, id] : vocab->items()) add(text, id);
    }
  }
  if (by_name.count("vocab.json")) {
    ASSIGN_OR_RETURN(const Json vocab, ReadJson(by_name["vocab.json"]));
    if (vocab.is_object()) {
      for (const auto& [text, id] : vocab.items()) add(text, id);
    }
  }
  HfSpecialTokens tokens;
  auto set = [&ids](Json* slot, const std::optional<std::string>& text) {
    if (!text) return;
    const auto found = ids.find(*text);
    if (found != ids.end()) *slot = found->second;
  };
  if (tokenizer_config.is_object()) {
    for (const auto& [key, slot] :
         {std::pair<const char*, Json*>{"bos_token", &tokens.bos_token_id},
          {"eos_token", &tokens.eos_token_id},
          {"pad_token", &tokens.pad_token_id}}) {
      if (tokenizer_config.contains(key)) set(slot, TokenText(tokenizer_config.at(key)));
    }
  } else if (by_name.count("vocab.json") && by_name.count("merges.txt")) {
    // GPT-2's files alone: GPT2Tokenizer's bos and eos are <|endoftext|>.
    set(&tokens.bos_token_id, "<|endoftext|>");
    set(&tokens.eos_token_id, "<|endoftext|>");
  }
  return tokens;
}

}  // namespace strata
