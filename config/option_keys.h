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

struct KeySpec {
  const char* name;  // "section.key"
  Field field;
  const char* doc;
  bool is_size;  // a uint64 byte count: "2GiB" or a number of bytes
};

// The one list of keys, in documentation order.
const std::vector<KeySpec>& Keys();
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

// Range and cross-field checks on merged options (option_checks.cc); each problem names
// the key, the value and what is expected.
void CheckOptions(const Options& options, std::vector<std::string>* problems);

}  // namespace strata::option_keys
