// JSON as Hugging Face's files are written, for the files strata writes for other tools
// (config.json, generation_config.json, adapter_config.json).
//
// transformers writes them with Python's json.dumps(indent=2): a float as repr() prints it,
// the shortest decimal that reads back as that double (1e-06, 500000.0). strata's model
// values are floats; widened to double they carry every digit of their binary value
// (rms_norm_eps 1e-6f is 9.999999974752427e-07), and nlohmann::json's own printer is not
// always shortest (Grisu2: 4.9582055e+19 can come out as 4.9582055000000004e+19). So:
// JsonNumber makes a float the double of its own shortest decimal, and HfJsonText prints
// every float by std::to_chars' shortest form in Python's layout.
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace strata {

// The double nearest the shortest decimal that reads back as `value` in float (1e-6f ->
// 1e-06, 0.95f -> 0.95, 500000.0f -> 500000.0), which HfJsonText prints as that decimal;
// infinities and NaN as they are.
double JsonNumber(float value);

// A double as Python's repr() writes it: the shortest decimal that reads back as `value`,
// positional when its decimal exponent is in [-4, 16) (with ".0" when whole: "500000.0",
// "0.0001"), else scientific with a signed two-digit-or-more exponent ("1e-06", "1e+16").
// Not finite: "NaN", "Infinity", "-Infinity", as Python's json writes them.
std::string PythonFloatText(double value);

// `json` as json.dumps(json, indent=2) writes it, plus a final newline: two-space indents,
// ", " and ": " separators, empty objects and arrays as {} and [], keys in the object's
// order (nlohmann::json keeps them sorted, as transformers' sort_keys=True does), floats
// by PythonFloatText. Strings are written as nlohmann::json writes them (UTF-8 kept).
std::string HfJsonText(const nlohmann::json& json);

}  // namespace strata
