// A Hugging Face tokenizer.json whose model is byte-level BPE; see tokenizer.h for what is
// read. Every field this reads is checked, every field it does not know is refused (a
// silently ignored field could change the ids), except post_processor (Encode adds no
// special tokens), version and the offsets-only ByteLevel.trim_offsets.
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/strict_json.h"
#include "data/tokenizer/byte_level_bpe.h"
#include "data/tokenizer/unicode_nfc.h"

namespace strata {
namespace {

using nlohmann::json;

// A value for a message: strings quoted, long values cut.
std::string Shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  Status Unsupported(const std::string& field, const json& value, const std::string& expected) {
    return absl::UnimplementedError(absl::StrCat("tokenizer.json '", path_, "': ", field, " ",
                                                 Shown(value), " is not supported (", expected,
                                                 ")"));
  }
  Status Malformed(const std::string& field, const std::string& problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json '", path_, "': ", field, " ", problem));
  }
  // Every key of `object` is one of `known`.
  Status OnlyKnownKeys(const json& object, const std::string& field,
                       std::initializer_list<const char*> known) {
    for (const auto& item : object.items()) {
      bool found = false;
      for (const char* key : known) found = found || item.key() == key;
      if (!found) {
        return absl::UnimplementedError(absl::StrCat(
            "tokenizer.json '", path_, "': ", field.empty() ? "" : field + ".", item.key(),
            " is not a field strata reads (known: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }
  // `object[key]` is absent, null, or equal to one of `allowed`.
  Status AbsentOrOneOf(const json& object, const std::string& field, const std::string& key,
                       std::initializer_list<json> allowed, const std::string& expected) {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return absl::OkStatus();
    for (const json& value : allowed) {
      if (*found == value) return absl::OkStatus();
    }
    return Unsupported(field.empty() ? key : field + "." + key, *found, expected);
  }
  // A boolean field, `fallback` when absent.
  StatusOr<bool> Bool(const json& object, const std::string& field, const std::string& key,
                      bool fallback) {
    const auto found = object.find(key);
    if (found == object.end()) return fallback;
    if (!found->is_boolean()) return Malformed(field + "." + key, "is not true or false");
    return found->get<bool>();
  }
  StatusOr<std::string> TypeOf(const json& object, const std::string& field) {
    if (!object.is_object())
      return Malformed(field, absl::StrCat(Shown(object), " is not an object"));
    const auto type = object.find("type");
    if (type == object.end() || !type->is_string()) return Malformed(field + ".type", "is missing");
    return type->get<std::string>();
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Status ReadModel(Reader& reader, const json& model, ByteLevelBpeSpec* spec,
                 const std::vector<std::string>& added_contents) {
  ASSIGN_OR_RETURN(const std::string type, reader.TypeOf(model, "model"));
  if (type != "BPE") {
    return reader.Unsupported("model.type", type,
                              "strata reads byte-level BPE tokenizers: model.type \"BPE\"; "
                              "for a SentencePiece model use sentencepiece:FILE.model");
  }
  RETURN_IF_ERROR(reader.OnlyKnownKeys(
      model, "model",
      {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
       "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"}));
  RETURN_IF_ERROR(reader.AbsentOrOneOf(model, "model", "dropout", {0, 0.0}, "only null"));
  RETURN_IF_ERROR(
      reader.AbsentOrOneOf(model, "model", "continuing_subword_prefix", {""}, "only null or \"\""));
  RETURN_IF_ERROR(
      reader.AbsentOrOneOf(model, "model", "end_of_word_suffix", {""}, "only null or \"\""));
  RETURN_IF_ERROR(reader.AbsentOrOneOf(
      model, "model", "byte_fallback", {false},
      "only false: a BPE with byte fallback is SentencePiece-style, not byte-level"));
  ASSIGN_OR_RETURN(spec->ignore_merges, reader.Bool(model, "model", "ignore_merges", false));
  // unk_token and fuse_unk never act: every byte has a token (NewByteLevelBpe checks).

  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return reader.Malformed("model.vocab", "is missing or not an object of token -> id");
  }
  spec->vocab.reserve(vocab->size());
  for (const auto& [token, id_value] : vocab->items()) {
    // Strictly: 4294967396 is no id (nlohmann's get<uint32_t>() would make it 100).
    StatusOr<uint32_t> id = JsonInteger<uint32_t>(id_value);
    if (!id.ok()) {
      return reader.Malformed(absl::StrCat("model.vocab \"", token, "\""),
                              absl::StrCat("has id ", id.status().message()));
    }
    StatusOr<std::string> bytes = UnicodeToBytes(token);
    if (!bytes.ok()) {
      // Special tokens kept in the vocabulary as written ("<s>" is fine, "<｜end｜>" is
      // not byte-level): they act through added_tokens.
      if (std::find(added_contents.begin(), added_contents.end(), token) != added_contents.end()) {
        continue;
      }
      return reader.Malformed(
          absl::StrCat("model.vocab \"", token, "\" (id ", *id, ")"),
          absl::StrCat("is not a byte-level token: ", bytes.status().message()));
    }
    spec->vocab.push_back({*std::move(bytes), *id});
  }

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return reader.Malformed("model.merges", "is missing or not an array");
  }
  spec->merges.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& merge = (*merges)[rank];
    std::vector<std::string> parts;
    if (merge.is_string()) {  // "left right" (tokens of the ByteLevel alphabet have no space)
      parts = absl::StrSplit(merge.get<std::string>(), ' ');
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {  // ["left", "right"], tokenizers 0.20 and later
      parts = {merge[0].get<std::string>(), merge[1].get<std::string>()};
    }
    if (parts.size() != 2) {
      return reader.Malformed(
          absl::StrCat("model.merges[", rank, "]"),
          absl::StrCat(Shown(merge), " is not \"left right\" or [left, right]"));
    }
    StatusOr<std::string> left = UnicodeToBytes(parts[0]);
    StatusOr<std::string> right = UnicodeToBytes(parts[1]);
    if (!left.ok() || !right.ok() || left->empty() || right->empty()) {
      return reader.Malformed(absl::StrCat("model.merges[", rank, "]"),
                              absl::StrCat(Shown(merge), " is not a pair of byte-level tokens"));
    }
    spec->merges.push_back({*std::move(left), *std::move(right)});
  }
  return absl::OkStatus();
}

// ByteLevel: the GPT-2 regex when use_regex (HF's default), and add_prefix_space.
Status ReadByteLevel(Reader& reader, const json& step, const std::string& field, bool after_split,
                     ByteLevelBpeSpec* spec) {
  RETURN_IF_ERROR(
      reader.OnlyKnownKeys(step, field, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
  ASSIGN_OR_RETURN(const bool use_regex, reader.Bool(step, field, "use_regex", true));
  ASSIGN_OR_RETURN(const bool add_prefix_space, reader.Bool(step, field, "add_prefix_space", true));
  if (add_prefix_space && after_split) {
    // Hugging Face then prefixes every piece of the split, not each stretch of text.
    return reader.Unsupported(field + ".add_prefix_space", true, "only false after a Split step");
  }
  spec->add_prefix_space = add_prefix_space;
  if (use_regex) spec->split_steps.push_back({kGpt2Pattern, false, field + ".use_regex"});
  return absl::OkStatus();
}

Status ReadSplit(Reader& reader, const json& step, const std::string& field,
                 ByteLevelBpeSpec* spec) {
  RETURN_IF_ERROR(reader.OnlyKnownKeys(step, field, {"type", "pattern", "behavior", "invert"}));
  const auto behavior = step.find("behavior");
  if (behavior == step.end() || *behavior != "Isolated") {
    return reader.Unsupported(field + ".behavior", behavior == step.end() ? json() : *behavior,
                              "only \"Isolated\"");
  }
  RETURN_IF_ERROR(reader.AbsentOrOneOf(step, field, "invert", {false}, "only false"));
  const auto pattern = step.find("pattern");
  if (pattern == step.end() || !pattern->is_object() || pattern->size() != 1) {
    return reader.Malformed(field + ".pattern", "is not {\"Regex\": ...} or {\"String\": ...}");
  }
  const auto regex = pattern->find("Regex");
  const auto literal = pattern->find("String");
  if (regex != pattern->end() && regex->is_string()) {
    spec->split_steps.push_back({regex->get<std::string>(), false, field + ".pattern.Regex"});
  } else if (literal != pattern->end() && literal->is_string()) {
    spec->split_steps.push_back({literal->get<std::string>(), true, field + ".pattern.String"});
  } else {
    return reader.Malformed(field + ".pattern", "is not {\"Regex\": ...} or {\"String\": ...}");
  }
  return absl::OkStatus();
}

Status ReadPreTokenizer(Reader& reader, const json& root, ByteLevelBpeSpec* spec) {
  const auto pre_tokenizer = root.find("pre_tokenizer");
  const std::string byte_level_only =
      "a byte-level BPE needs a ByteLevel pre-tokenizer, alone or last in a Sequence of "
      "Split steps";
  if (pre_tokenizer == root.end() || pre_tokenizer->is_null()) {
    return reader.Unsupported("pre_tokenizer", nullptr, byte_level_only);
  }
  ASSIGN_OR_RETURN(const std::string type, reader.TypeOf(*pre_tokenizer, "pre_tokenizer"));
  if (type == "ByteLevel")
    return ReadByteLevel(reader, *pre_tokenizer, "pre_tokenizer", false, spec);
  if (type != "Sequence") return reader.Unsupported("pre_tokenizer.type", type, byte_level_only);
  RETURN_IF_ERROR(reader.OnlyKnownKeys(*pre_tokenizer, "pre_tokenizer", {"type", "pretokenizers"}));
  const auto steps = pre_tokenizer->find("pretokenizers");
  if (steps == pre_tokenizer->end() || !steps->is_array() || steps->empty()) {
    return reader.Malformed("pre_tokenizer.pretokenizers", "is missing or empty");
  }
  for (size_t i = 0; i < steps->size(); ++i) {
    const std::string field = absl::StrCat("pre_tokenizer.pretokenizers[", i, "]");
    ASSIGN_OR_RETURN(const std::string step_type, reader.TypeOf((*steps)[i], field));
    const bool last = i + 1 == steps->size();
    if (step_type == "Split" && !last) {
      RETURN_IF_ERROR(ReadSplit(reader, (*steps)[i], field, spec));
    } else if (step_type == "ByteLevel" && last) {
      RETURN_IF_ERROR(ReadByteLevel(reader, (*steps)[i], field, i > 0, spec));
    } else {
      return reader.Unsupported(field + ".type", step_type, byte_level_only);
    }
  }
  return absl::OkStatus();
}

// The normalizer: null, {"type": "NFC"}, or a Sequence of that one step (Qwen2's forms).
Status ReadNormalizer(Reader& reader, const json& root, ByteLevelBpeSpec* spec) {
  const auto normalizer = root.find("normalizer");
  if (normalizer == root.end() || normalizer->is_null()) return absl::OkStatus();
  const std::string nfc_only = "only null, NFC, or a Sequence of one NFC";
  if (!normalizer->is_object() || normalizer->find("type") == normalizer->end()) {
    return reader.Unsupported("normalizer", *normalizer, nfc_only);
  }
  ASSIGN_OR_RETURN(std::string type, reader.TypeOf(*normalizer, "normalizer"));
  const json* step = &*normalizer;
  std::string field = "normalizer";
  if (type == "Sequence") {
    RETURN_IF_ERROR(reader.OnlyKnownKeys(*normalizer, field, {"type", "normalizers"}));
    const auto steps = normalizer->find("normalizers");
    if (steps == normalizer->end() || !steps->is_array()) {
      return reader.Malformed("normalizer.normalizers", "is missing or not an array");
    }
    if (steps->size() != 1) {
      return reader.Unsupported("normalizer.normalizers", *steps, nfc_only);
    }
    step = &(*steps)[0];
    field = "normalizer.normalizers[0]";
    ASSIGN_OR_RETURN(type, reader.TypeOf(*step, field));
  }
  if (type != "NFC") return reader.Unsupported(field + ".type", type, nfc_only);
  RETURN_IF_ERROR(reader.OnlyKnownKeys(*step, field, {"type"}));
  spec->nfc = true;
  return absl::OkStatus();
}

Status ReadAddedTokens(Reader& reader, const json& root, ByteLevelBpeSpec* spec) {
  const auto added = root.find("added_tokens");
  if (added == root.end() || added->is_null()) return absl::OkStatus();
  if (!added->is_array()) return reader.Malformed("added_tokens", "is not an array");
  for (size_t i = 0; i < added->size(); ++i) {
    const json& token = (*added)[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    if (!token.is_object()) return reader.Malformed(field, "is not an object");
    RETURN_IF_ERROR(reader.OnlyKnownKeys(
        token, field,
        {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      RETURN_IF_ERROR(reader.AbsentOrOneOf(token, field, flag, {false},
                                           "only false: tokens are matched literally"));
    }
    const auto id = token.find("id");
    const auto content = token.find("content");
    if (id == token.end()) return reader.Malformed(field + ".id", "is missing");
    StatusOr<uint32_t> id_value = JsonInteger<uint32_t>(*id);
    if (!id_value.ok()) {
      return reader.Malformed(field + ".id", absl::StrCat("is ", id_value.status().message()));
    }
    if (content == token.end() || !content->is_string() || content->get<std::string>().empty()) {
      return reader.Malformed(field + ".content", "is missing or empty");
    }
    ASSIGN_OR_RETURN(const bool special, reader.Bool(token, field, "special", false));
    ASSIGN_OR_RETURN(const bool normalized, reader.Bool(token, field, "normalized", !special));
    if (spec->nfc && normalized) {
      // Hugging Face matches the token's NFC form; strata matches the content as written.
      ASSIGN_OR_RETURN(const bool is_nfc, IsNfc(content->get<std::string>()));
      if (!is_nfc) {
        return reader.Unsupported(field + ".content", *content,
                                  "with the NFC normalizer and normalized: true, only "
                                  "content already in NFC");
      }
    }
    spec->added_tokens.push_back({content->get<std::string>(), *id_value, normalized});
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> OpenHfTokenizerJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   ReadTokenizerFile(path, "Hugging Face tokenizer.json",
                                     ": give a tokenizer.json file, or a model directory "
                                     "holding tokenizer.json or tokenizer.model"));
  // Strictly: a token written twice in model.vocab (or any key twice) is refused, where
  // nlohmann would keep the last id silently.
  json root;
  if (const std::string problem = ParseJsonStrict(text, &root); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json '", path, "' ", problem));
  }
  Reader reader(path);
  if (!root.is_object()) return reader.Malformed("the top level", "is not an object");
  RETURN_IF_ERROR(
      reader.OnlyKnownKeys(root, "",
                           {"version", "truncation", "padding", "added_tokens", "normalizer",
                            "pre_tokenizer", "post_processor", "decoder", "model"}));
  RETURN_IF_ERROR(reader.AbsentOrOneOf(root, "", "truncation", {}, "only null"));
  RETURN_IF_ERROR(reader.AbsentOrOneOf(root, "", "padding", {}, "only null"));
  const auto decoder = root.find("decoder");
  if (decoder != root.end() && !decoder->is_null()) {
    ASSIGN_OR_RETURN(const std::string type, reader.TypeOf(*decoder, "decoder"));
    if (type != "ByteLevel") return reader.Unsupported("decoder.type", type, "only ByteLevel");
  }

  ByteLevelBpeSpec spec;
  spec.source = absl::StrCat("tokenizer.json '", path, "'");
  RETURN_IF_ERROR(ReadNormalizer(reader, root, &spec));
  RETURN_IF_ERROR(ReadAddedTokens(reader, root, &spec));
  std::vector<std::string> added_contents;
  for (const auto& token : spec.added_tokens) added_contents.push_back(token.content);
  const auto model = root.find("model");
  if (model == root.end()) return reader.Malformed("model", "is missing");
  RETURN_IF_ERROR(ReadModel(reader, *model, &spec, added_contents));
  RETURN_IF_ERROR(ReadPreTokenizer(reader, root, &spec));

  std::vector<std::string> steps;
  for (const auto& step : spec.split_steps) {
    steps.push_back(step.pattern == kGpt2Pattern ? "GPT-2's regex"
                    : step.literal               ? "a literal split"
                                                 : "a regex split");
  }
  spec.description = absl::StrCat(
      "Hugging Face byte-level BPE from ", path, spec.nfc ? ", NFC-normalized" : "",
      ", pre-tokenized by ", steps.empty() ? "nothing" : absl::StrJoin(steps, " then "),
      spec.add_prefix_space ? " with a prefix space" : "",
      spec.ignore_merges ? ", whole-word tokens first (ignore_merges)" : "");
  return NewByteLevelBpe(std::move(spec));
}

}  // namespace strata
