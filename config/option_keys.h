// The key table of the options (internal to config/): every config key, the field of
// Options it sets, its documentation, and the conversions of values to and from --set text
// and JSON. The one list that parsing (options_parse.cc), validation (option_checks.cc),
// --help-config and the resolved-config log are driven by; defaults come from Options{}
// itself, so docs cannot drift from code. Thread-safety: the tables are immutable
// function-local statics.
#pragma once

#include <charconv>
#include <functional>
#include <string>
#include <system_error>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/options.h"

namespace strata::option_keys {

using Json = nlohmann::json;

// A key with a few named values: a field of one of options.h's enums (or DType), read and
// written as the index of its name in OptionNames.
struct EnumField {
  std::vector<std::string> names;
  std::function<int(const Options&)> get;
  std::function<void(Options&, int)> set;
};

// An accessor to one field of Options; the alternative's type picks the parser.
using Field = std::variant<int* (*)(Options&), float* (*)(Options&), double* (*)(Options&),
                           uint64_t* (*)(Options&), std::string* (*)(Options&), EnumField,
                           bool* (*)(Options&)>;

// The values a numeric key allows: the key's single-key check (CheckOptions) and its line
// in --help-config both come from here.
struct Range {
  bool has_min = false, has_max = false;
  double min = 0, max = 0;
  bool min_open = false, max_open = false;
  const char* noun = "";      // before "in [a, b]": "a fraction", "a rank count"
  const char* suffix = "";    // after ">= a" or "> a": " seconds", " (0 disables clipping)"
  const char* expected = "";  // the whole expected text, where an interval says it badly
  uint64_t multiple_of = 0;   // (sizes) a positive multiple of this
  bool empty() const { return !has_min && !has_max && multiple_of == 0; }
};
// What a value of `range` is, as an error's "expected ..." says it: "in [1, 1024]",
// ">= 0 (0 disables clipping)", "a fraction in (0, 1)".
std::string ExpectedText(const Range& range);

struct KeySpec {
  const char* name;  // "section.key"
  Field field;
  const char* doc;
  bool is_size;  // a uint64 byte count: "2GiB" or a number of bytes
  Range range;   // numeric keys: the values allowed ({}: any the type holds)
  // A machine's own business (a path or limit of its node): ranks may set it differently
  // (session/rank_agreement.h compares the others).
  bool rank_local;
};

// The one list of keys, in documentation order.
const std::vector<KeySpec>& Keys();
// The rank-local keys' names (KeySpec::rank_local), in table order.
std::vector<std::string> RankLocalKeyNames();
const KeySpec* FindKey(const std::string& name);

// A named model: every field of ModelOptions except `preset`, which is the name.
struct Preset {
  const char* name;
  ModelOptions model;
};
const std::vector<Preset>& Presets();
const Preset* FindPreset(const std::string& name);
std::string PresetList();  // "tiny, small, ..."

// "a, b or c".
std::string OneOf(const std::vector<std::string>& names);

// The shortest text that parses back to `value`.
template <typename T>
std::string NumberText(T value) {
  char buffer[64];
  auto [ptr, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) return "?";
  return std::string(buffer, ptr);
}
// Sizes are written exactly, in the largest binary unit that divides them ("8GiB").
std::string SizeText(uint64_t bytes);
// A JSON value for messages: its text (shortened) and its type.
std::string JsonText(const Json& value);

// Store the --set text / the JSON value into the key's field. Return "" or the problem
// (without the key's name).
std::string SetFromText(const KeySpec& spec, const std::string& text, Options& options);
std::string SetFromJson(const KeySpec& spec, const Json& value, Options& options);
// The key's value in --set syntax, and its type's name for --help-config.
std::string ValueText(const KeySpec& spec, const Options& options);
std::string TypeName(const KeySpec& spec);

// Every key's own check (its Range, a known preset, a step range), then the named rules
// across keys and the model's shape rules (models/shape_rules.h), on merged options
// (option_checks.cc); each problem names the key, the value and what is expected.
void CheckOptions(const Options& options, std::vector<std::string>* problems);

}  // namespace strata::option_keys
