// See strict_json.h.
#include "core/strict_json.h"

#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {
namespace {

using Json = nlohmann::json;

Status Refused(const Json& value, const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat(JsonShown(value), ": expected ", expected));
}

}  // namespace

std::string PrintableText(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", byte));
    }
  }
  return out;
}

std::string ParseJsonStrict(std::string_view text, Json* out, std::string* duplicate_top_key) {
  struct OpenObject {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<OpenObject> open;
  // A raw NUL is never valid JSON, but nlohmann takes it for the end of the input.
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    return absl::StrCat("is not valid UTF-8 JSON: a NUL byte at offset ", nul);
  }
  std::string problem;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      std::string key = parsed.get<std::string>();
      if (!open.back().keys.insert(key).second && problem.empty()) {
        if (depth == 1) {
          if (duplicate_top_key != nullptr) *duplicate_top_key = key;
          problem = absl::StrCat("key '", PrintableText(key), "' appears twice");
        } else {
          const std::string& parent = open.size() >= 2 ? open[open.size() - 2].last_key : "";
          problem = absl::StrCat("key '", PrintableText(key),
                                 "' appears twice in the object of '", PrintableText(parent), "'");
        }
      }
      open.back().last_key = std::move(key);
    }
    return true;
  };
  try {
    *out = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    return absl::StrCat("is not valid UTF-8 JSON: ", PrintableText(e.what()));
  }
  return problem;
}

std::string JsonShown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return PrintableText(text);
}

namespace strict_json_internal {
Status NotAnInteger(const Json& value, int64_t min, uint64_t max) {
  return Refused(value, absl::StrCat("an integer from ", min, " to ", max));
}
}  // namespace strict_json_internal

StatusOr<double> JsonDouble(const Json& value) {
  // is_number() is false for booleans: true is not 1 here.
  if (!value.is_number()) return Refused(value, "a number");
  const double v = value.get<double>();
  if (!std::isfinite(v)) return Refused(value, "a finite number");
  return v;
}

StatusOr<float> JsonFloat(const Json& value) {
  ASSIGN_OR_RETURN(const double v, JsonDouble(value));
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
    return Refused(value, "a number within float's range (+-3.4e38)");
  }
  return static_cast<float>(v);
}

StatusOr<bool> JsonBool(const Json& value) {
  if (!value.is_boolean()) return Refused(value, "true or false");
  return value.get<bool>();
}

StatusOr<std::string> JsonString(const Json& value) {
  if (!value.is_string()) return Refused(value, "a string");
  return value.get<std::string>();
}

}  // namespace strata
