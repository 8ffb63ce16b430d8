// JSON read strictly, for the files that describe a model (Hugging Face's config.json and
// tokenizer.json, GPT-2's encoder.json, safetensors headers and indexes): nlohmann's own
// conversions are silent (`get<int>()` of 4294967396 is 100, of 32.9 is 32, of true is 1;
// of 2147483648 it is -2147483648), and its parser keeps the last of two equal keys. Here:
//  - ParseJsonStrict refuses a syntax error, a NUL byte and a key twice in one object;
//  - JsonInteger<T> takes only a JSON integer (not 32.0, not true) within T's range;
//  - JsonFloat / JsonDouble take a JSON number (integer or not; never a boolean) that is
//    finite in the target type; JsonBool only true or false; JsonString only a string.
// Each refusal is kInvalidArgument whose message is the value as written and what was
// expected ("4294967396: expected an integer from -2147483648 to 2147483647"); the caller
// puts the file and the key in front (Annotate).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/status.h"

namespace strata {

// Parses JSON text into *out. Returns "" or what is wrong: a syntax error (which includes
// invalid UTF-8), a NUL byte, or a key that appears twice in one object ("key 'n_layer'
// appears twice", "... in the object of 'rope_scaling'"). For a key twice at the top level,
// *duplicate_top_key (where not null) is set to it.
std::string ParseJsonStrict(std::string_view text, nlohmann::json* out,
                            std::string* duplicate_top_key = nullptr);

// Text from a file made printable for a message: bytes outside printable ASCII as \xNN.
std::string PrintableText(std::string_view text);

// A JSON value for a message: as written (numbers in their shortest round-trip form,
// strings quoted), cut to about 80 characters.
std::string JsonShown(const nlohmann::json& value);

namespace strict_json_internal {
Status NotAnInteger(const nlohmann::json& value, int64_t min, uint64_t max);
}  // namespace strict_json_internal

// `value` as T when it is a JSON integer in [min(T), max(T)].
template <typename T>
StatusOr<T> JsonInteger(const nlohmann::json& value) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an integer type");
  constexpr int64_t kMin = static_cast<int64_t>(std::numeric_limits<T>::min());
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<T>::max());
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v <= kMax) return static_cast<T>(v);
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v >= kMin && (v < 0 || static_cast<uint64_t>(v) <= kMax)) return static_cast<T>(v);
  }
  return strict_json_internal::NotAnInteger(value, kMin, kMax);
}

// A JSON number (integer or not) that is finite as a double / as a float.
StatusOr<double> JsonDouble(const nlohmann::json& value);
StatusOr<float> JsonFloat(const nlohmann::json& value);
// true or false.
StatusOr<bool> JsonBool(const nlohmann::json& value);
StatusOr<std::string> JsonString(const nlohmann::json& value);

// The strict reader for T (int-like, float, double, bool, std::string).
template <typename T>
StatusOr<T> JsonAs(const nlohmann::json& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return JsonBool(value);
  } else if constexpr (std::is_integral_v<T>) {
    return JsonInteger<T>(value);
  } else if constexpr (std::is_same_v<T, float>) {
    return JsonFloat(value);
  } else if constexpr (std::is_same_v<T, double>) {
    return JsonDouble(value);
  } else {
    static_assert(std::is_same_v<T, std::string>, "int, float, double, bool or std::string");
    return JsonString(value);
  }
}

}  // namespace strata
