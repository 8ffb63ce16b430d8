// See bytes.h.
#include "core/bytes.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

StatusOr<uint64_t> ParseBytes(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  std::string number = text.substr(0, pos);
  std::string suffix = text.substr(pos);
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(0, 1);
  char* end = nullptr;
  double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a size (expected e.g. 4096, 512MiB, 2GiB, 1.5GB)"));
  }
  double scale;
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "KiB" || suffix == "K") scale = 1024.0;
  else if (suffix == "MiB" || suffix == "M") scale = 1024.0 * 1024;
  else if (suffix == "GiB" || suffix == "G") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "TiB" || suffix == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (suffix == "KB") scale = 1e3;
  else if (suffix == "MB") scale = 1e6;
  else if (suffix == "GB") scale = 1e9;
  else if (suffix == "TB") scale = 1e12;
  else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' has unknown unit '", suffix, "' (expected B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"));
  }
  const std::string too_large = absl::StrCat(
      "'", text, "' is too large a size (more than 2^64 - 1 bytes, 16 EiB)");
  if (number.find('.') == std::string::npos) {
    // Whole numbers exactly, with overflow checked (a double would round above 2^53).
    uint64_t whole = 0;
    auto [ptr, error] = std::from_chars(number.data(), number.data() + number.size(), whole);
    if (error != std::errc() || ptr != number.data() + number.size()) {
      return absl::InvalidArgumentError(too_large);
    }
    const uint64_t multiplier = static_cast<uint64_t>(scale);
    if (multiplier != 0 && whole > UINT64_MAX / multiplier) {
      return absl::InvalidArgumentError(too_large);
    }
    return whole * multiplier;
  }
  const double bytes = value * scale;
  if (!(bytes < 18446744073709551616.0)) return absl::InvalidArgumentError(too_large);
  return static_cast<uint64_t>(std::round(bytes));
}

}  // namespace strata
