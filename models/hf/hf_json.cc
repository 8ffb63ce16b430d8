// See hf_json.h.
#include "models/hf/hf_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace strata {
namespace {

void Append(const nlohmann::json& json, int depth, std::string* out) {
  const std::string pad(2 * (depth + 1), ' ');
  const std::string close(2 * depth, ' ');
  if (json.is_object() || json.is_array()) {
    const bool object = json.is_object();
    if (json.empty()) {
      *out += object ? "{}" : "[]";
      return;
    }
    *out += object ? "{\n" : "[\n";
    bool first = true;
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (!first) *out += ",\n";
      first = false;
      *out += pad;
      if (object) *out += nlohmann::json(it.key()).dump() + ": ";
      Append(it.value(), depth + 1, out);
    }
    *out += "\n" + close + (object ? "}" : "]");
    return;
  }
  if (json.is_number_float()) {
    *out += PythonFloatText(json.get<double>());
    return;
  }
  *out += json.dump();  // null, booleans, integers, strings
}

}  // namespace

double JsonNumber(float value) {
  if (!std::isfinite(value)) return static_cast<double>(value);
  // std::to_chars without a precision writes the shortest digits that read back (as float);
  // scientific, because a whole number in its fixed form keeps every digit (9.028231e+10f
  // would be 90282311680).
  char text[64];
  const std::to_chars_result written =
      std::to_chars(text, text + sizeof(text), value, std::chars_format::scientific);
  double widened = static_cast<double>(value);
  if (written.ec != std::errc()) return widened;
  std::from_chars(text, written.ptr, widened);
  return widened;
}

std::string PythonFloatText(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // The shortest digits and their exponent: "d.ddde±XX" (value = d.ddd x 10^exponent).
  char text[64];
  const std::to_chars_result written =
      std::to_chars(text, text + sizeof(text), std::fabs(value), std::chars_format::scientific);
  const std::string scientific(text, written.ptr);
  const size_t e = scientific.find('e');
  std::string digits = scientific.substr(0, 1);
  if (e > 1) digits += scientific.substr(2, e - 2);  // after the point
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  std::string out = std::signbit(value) ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int magnitude = std::abs(exponent);
    out += exponent < 0 ? "e-" : "e+";
    if (magnitude < 10) out += "0";
    out += std::to_string(magnitude);
  } else if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t whole = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= whole) {
      out += digits + std::string(whole - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, whole) + "." + digits.substr(whole);
    }
  }
  return out;
}

std::string HfJsonText(const nlohmann::json& json) {
  std::string out;
  Append(json, 0, &out);
  return out + "\n";
}

}  // namespace strata
