// Byte sizes as people write and read them: "2GiB", "512MiB", "1.5GB", "4096".
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

// Formats bytes for people: "1.50 GiB", "512 B".
std::string FormatBytes(uint64_t bytes);
// Parses "2GiB", "512MiB", "1.5GB", "4096" (bytes). Errors name the text.
StatusOr<uint64_t> ParseBytes(const std::string& text);

}  // namespace strata
