// Config parsing; see options_parse.h. Everything is driven by the key table
// (option_keys.h): each entry names a key, points at its field of Options and documents
// it; the field's type picks the parser. Problems are collected into a list instead of
// returning early, so one status names all of them. nlohmann exceptions are caught here
// and never leave this file. Thread-safety: pure functions over immutable tables.
#include "config/options_parse.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sys/stat.h>
#include <system_error>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/option_keys.h"
#include "core/did_you_mean.h"
#include "core/input_file.h"
#include "models/hf/hf_model.h"
#include "models/llmc/llmc_header.h"

namespace strata {
namespace {

using namespace option_keys;  // NOLINT: the key table is this file's vocabulary

std::string SectionOf(const std::string& name) { return name.substr(0, name.find('.')); }

std::string KeyPartOf(const std::string& name) {
  size_t dot = name.find('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::vector<std::string> Sections() {
  std::vector<std::string> sections;
  for (const KeySpec& spec : Keys()) {
    std::string section = SectionOf(spec.name);
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      sections.push_back(section);
    }
  }
  return sections;
}

bool IsSection(const std::string& name) {
  std::vector<std::string> sections = Sections();
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

// A known key that `name` ("section.key" or a bare "key") most likely meant, or "".
std::string SuggestKey(const std::string& name) {
  // The key exists in another section (or the section was left out): suggest it there.
  std::string key_part = KeyPartOf(name);
  for (const KeySpec& spec : Keys()) {
    if (KeyPartOf(spec.name) == key_part) return spec.name;
  }
  std::vector<std::string> names = ConfigKeys();
  return ClosestMatch(name, names);
}

std::string UnknownKeyProblem(const std::string& name) {
  std::string suggestion = SuggestKey(name);
  std::string hint = suggestion.empty() ? "" : absl::StrCat(" (did you mean ", suggestion, "?)");
  std::string section = SectionOf(name);
  if (!IsSection(section)) {
    return absl::StrCat(name, ": unknown section '", section, "' (expected one of ",
                        absl::StrJoin(Sections(), ", "), ")", hint);
  }
  return absl::StrCat(name, ": unknown key", hint);
}

std::string UnknownSectionProblem(const std::string& section) {
  std::string hint;
  std::string suggestion = ClosestMatch(section, Sections());
  if (!suggestion.empty()) {
    hint = absl::StrCat(" (did you mean ", suggestion, "?)");
  } else {
    // A key written at top level instead of inside its section.
    for (const KeySpec& spec : Keys()) {
      if (KeyPartOf(spec.name) == section) {
        hint = absl::StrCat(" (did you mean ", spec.name, "? keys go inside their section: {\"",
                            SectionOf(spec.name), "\": {\"", section, "\": ...}})");
        break;
      }
    }
  }
  return absl::StrCat(section, ": unknown section (expected one of ",
                      absl::StrJoin(Sections(), ", "), ")", hint);
}

// Parses all of `text` as a number of type T (no leading '+', no whitespace).

// Config files are small: a cap on size and nesting keeps a wrong file (a data file, a
// device, a hostile deep nesting) from eating memory or the parser's stack.
constexpr int64_t kMaxConfigBytes = 1 << 20;
constexpr int kMaxConfigDepth = 32;

// The deepest nesting of arrays and objects in `text` (brackets inside strings skipped);
// stops counting past `limit`.
int JsonDepth(const std::string& text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// Reads and parses the JSON file. On failure appends a problem naming the file and returns
// nullopt.
std::optional<Json> LoadJsonFile(const std::string& path, std::vector<std::string>* problems) {
  const std::string where = absl::StrCat("config file '", path, "'");
  // Regular, within kMaxConfigBytes, never blocking (a FIFO), noted as an input of the run.
  StatusOr<std::string> read = ReadInputFile(path, "the --config file", kMaxConfigBytes);
  if (!read.ok()) {
    problems->push_back(std::string(read.status().message()));
    return std::nullopt;
  }
  const std::string& text = *read;
  if (JsonDepth(text, kMaxConfigDepth) > kMaxConfigDepth) {
    problems->push_back(absl::StrCat(where, ": nested deeper than ", kMaxConfigDepth,
                                     " levels; a config is {\"section\": {\"key\": value}}"));
    return std::nullopt;
  }
  try {
    return Json::parse(text);
  } catch (const Json::exception& error) {
    // what() is "[json.exception.parse_error.101] parse error at line L, column C: ...".
    std::string message = error.what();
    size_t bracket = message.find("] ");
    if (message.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) {
      message = message.substr(bracket + 2);
    }
    problems->push_back(absl::StrCat("config file '", path, "': invalid JSON: ", message));
  } catch (const std::exception& error) {
    problems->push_back(absl::StrCat("config file '", path, "': invalid JSON: ", error.what()));
  }
  return std::nullopt;
}

// Applies every key of the parsed file except a string model.preset (applied earlier).
void ApplyJson(const Json& root, const std::string& path, Options& options,
               std::vector<std::string>* problems) {
  std::string from = absl::StrCat(" [in ", path, "]");
  if (!root.is_object()) {
    problems->push_back(absl::StrCat("config file '", path, "': got ", JsonText(root),
                                     ", expected an object of sections like "
                                     "{\"train\": {\"steps\": 10}}"));
    return;
  }
  for (const auto& [section, body] : root.items()) {
    if (!IsSection(section)) {
      problems->push_back(UnknownSectionProblem(section) + from);
      continue;
    }
    if (!body.is_object()) {
      problems->push_back(absl::StrCat(section, ": got ", JsonText(body),
                                       ", expected an object of keys like {\"key\": value}", from));
      continue;
    }
    for (const auto& [key, value] : body.items()) {
      std::string name = absl::StrCat(section, ".", key);
      const KeySpec* spec = FindKey(name);
      if (spec == nullptr) {
        problems->push_back(UnknownKeyProblem(name) + from);
        continue;
      }
      if (name == "model.preset" && value.is_string()) continue;
      std::string problem = SetFromJson(*spec, value, options);
      if (!problem.empty()) problems->push_back(absl::StrCat(name, ": ", problem, from));
    }
  }
}

struct Override {
  const KeySpec* spec;
  std::string value;
  std::string raw;  // the whole --set argument, for messages
};

// Splits "section.key=value" and finds the key; on failure appends a problem.
std::optional<Override> SplitSet(const std::string& raw, std::vector<std::string>* problems) {
  size_t equals = raw.find('=');
  if (equals == std::string::npos) {
    problems->push_back(
        absl::StrCat("--set '", raw, "': expected section.key=value (missing '=')"));
    return std::nullopt;
  }
  std::string name = raw.substr(0, equals);
  if (name.find('.') == std::string::npos) {
    std::string suggestion = SuggestKey(name);
    problems->push_back(absl::StrCat(
        "--set '", raw, "': expected section.key=value (key '", name, "' has no section",
        suggestion.empty() ? "" : absl::StrCat("; did you mean ", suggestion, "?"), ")"));
    return std::nullopt;
  }
  const KeySpec* spec = FindKey(name);
  if (spec == nullptr) {
    problems->push_back(absl::StrCat(UnknownKeyProblem(name), " [in --set ", raw, "]"));
    return std::nullopt;
  }
  return Override{spec, raw.substr(equals + 1), raw};
}

std::string FormatProblems(const std::vector<std::string>& problems) {
  return absl::StrCat("invalid configuration (", problems.size(),
                      problems.size() == 1 ? " problem" : " problems", "):\n  ",
                      absl::StrJoin(problems, "\n  "));
}


}  // namespace

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> names;
  for (const KeySpec& spec : Keys()) names.push_back(spec.name);
  return names;
}

std::vector<std::string> RankLocalKeys() { return RankLocalKeyNames(); }

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const Preset& preset : Presets()) names.push_back(preset.name);
  return names;
}

StatusOr<Options> ParseOptions(const std::string& config_json_path,
                               const std::vector<std::string>& sets) {
  std::vector<std::string> problems;
  std::optional<Json> file;
  if (!config_json_path.empty()) file = LoadJsonFile(config_json_path, &problems);

  std::vector<Override> overrides;
  for (const std::string& raw : sets) {
    if (std::optional<Override> override_entry = SplitSet(raw, &problems)) {
      overrides.push_back(*override_entry);
    }
  }

  // The preset goes first, then model.from's config.json, wherever they are given; a --set
  // beats the file, the last --set wins.
  Options options;
  std::optional<std::string> preset, from;
  if (file && file->is_object()) {
    auto model = file->find("model");
    if (model != file->end() && model->is_object()) {
      auto preset_value = model->find("preset");
      if (preset_value != model->end() && preset_value->is_string()) {
        preset = preset_value->get<std::string>();
      }
      auto from_value = model->find("from");
      if (from_value != model->end() && from_value->is_string()) {
        from = from_value->get<std::string>();
      }
    }
  }
  for (const Override& override_entry : overrides) {
    if (std::string(override_entry.spec->name) == "model.preset") preset = override_entry.value;
    if (std::string(override_entry.spec->name) == "model.from") from = override_entry.value;
  }
  if (preset) {
    options.model.preset = *preset;  // an unknown name is reported by CheckOptions
    if (const Preset* found = FindPreset(*preset)) {
      options.model = found->model;
      options.model.preset = *preset;
    }
  }
  if (from && !from->empty()) {
    StatusOr<ModelOptions> config = absl::InvalidArgumentError(
        absl::StrCat("got '", *from,
                     "', expected hf:DIR (a Hugging Face model directory) or llmc:FILE (an "
                     "llm.c GPT-2 checkpoint)"));
    if (absl::StartsWith(*from, "hf:") && from->size() > 3) {
      config = ReadHfConfig(from->substr(3));
    } else if (absl::StartsWith(*from, "llmc:") && from->size() > 5) {
      config = ReadLlmcHeader(from->substr(5));
    }
    if (config.ok()) {
      const std::string preset_name = options.model.preset;
      options.model = *config;
      options.model.preset = preset_name;
      options.model.from = *from;
    } else {
      problems.push_back(absl::StrCat("model.from: ", config.status().message()));
    }
  }
  if (file) {
    try {
      ApplyJson(*file, config_json_path, options, &problems);
    } catch (const std::exception& error) {  // not expected: every access is type-checked
      problems.push_back(absl::StrCat("config file '", config_json_path, "': ", error.what()));
    }
  }

  for (const Override& override_entry : overrides) {
    if (std::string(override_entry.spec->name) == "model.preset") continue;
    std::string problem = SetFromText(*override_entry.spec, override_entry.value, options);
    if (!problem.empty()) {
      problems.push_back(absl::StrCat(override_entry.spec->name, ": ", problem, " [in --set ",
                                      override_entry.raw, "]"));
    }
  }

  // Cross-field checks only make sense on the merged result.
  CheckOptions(options, &problems);
  if (!problems.empty()) return absl::InvalidArgumentError(FormatProblems(problems));
  return options;
}

Status ValidateOptions(const Options& options) {
  std::vector<std::string> problems;
  CheckOptions(options, &problems);
  if (!problems.empty()) return absl::InvalidArgumentError(FormatProblems(problems));
  return absl::OkStatus();
}

std::string DescribeKeys() {
  const Options defaults;
  std::string out =
      "strata configuration keys. Give them in a JSON file nested by section, e.g.\n"
      "  {\"model\": {\"preset\": \"tiny\"}, \"train\": {\"steps\": 10}}\n"
      "or as --set section.key=value. Order: defaults, model.preset, the file's other keys,\n"
      "then each --set in order. Unknown keys are errors.\n";
  std::string section;
  for (const KeySpec& spec : Keys()) {
    if (SectionOf(spec.name) != section) {
      section = SectionOf(spec.name);
      absl::StrAppend(&out, "\n[", section, "]\n");
    }
    std::string value = ValueText(spec, defaults);
    if (TypeName(spec) == "string") value = absl::StrCat("\"", value, "\"");
    absl::StrAppend(&out, "  ", spec.name, " (", TypeName(spec), ", default ", value, ")\n",
                    "      ", spec.doc,
                    spec.range.empty() ? "" : absl::StrCat(" Allowed: ", ExpectedText(spec.range), "."),
                    spec.rank_local ? " May differ between ranks." : "", "\n");
    if (std::string(spec.name) == "model.preset") {
      for (const Preset& preset : Presets()) {
        const ModelOptions& m = preset.model;
        absl::StrAppend(&out, "      ", preset.name, ": ", OptionName(m.family), ", layers ",
                        m.layers, ", heads ", m.heads);
        if (m.kv_heads != 0) absl::StrAppend(&out, ", kv_heads ", m.kv_heads);
        if (m.head_dim != 0) absl::StrAppend(&out, ", head_dim ", m.head_dim);
        absl::StrAppend(&out, ", channels ", m.channels);
        if (m.ffn_hidden != 0) absl::StrAppend(&out, ", ffn_hidden ", m.ffn_hidden);
        absl::StrAppend(&out, ", vocab ", m.vocab, ", max_seq_len ", m.max_seq_len);
        if (m.family == ModelFamily::kLlama) {
          absl::StrAppend(&out, ", rope ", DescribeRope(m.rope),
                          m.tie_embeddings ? ", tied" : ", untied");
        }
        absl::StrAppend(&out, "\n");
      }
    }
  }
  return out;
}

std::string FormatResolved(const Options& options) {
  std::string out;
  for (const KeySpec& spec : Keys()) {
    absl::StrAppend(&out, spec.name, "=", ValueText(spec, options), "\n");
  }
  return out;
}

std::string FormatConfigJson(const Options& options) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const KeySpec& spec : Keys()) {
    const std::string name = spec.name;
    const size_t dot = name.find('.');
    const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
    const std::string text = ValueText(spec, options);
    const std::string type = TypeName(spec);
    nlohmann::ordered_json value;
    if (type == "int" || type == "float" || type == "uint64") {
      value = nlohmann::ordered_json::parse(text);
    } else if (type == "bool") {
      value = text == "true";
    } else {
      value = text;
    }
    config[section][key] = value;
  }
  return config.dump(2) + "\n";
}

StatusOr<std::pair<int, int>> ParseStepRange(const std::string& text) {
  const size_t colon = text.find(':');
  int first = 0, last = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(0, colon), &first) ||
      !absl::SimpleAtoi(text.substr(colon + 1), &last) || first < 1 || last < first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.trace_steps: got '", text,
        "', expected A:B, the steps A through B to trace (1-based, 1 <= A <= B), e.g. 2:3"));
  }
  return std::make_pair(first, last);
}

}  // namespace strata
