// Rank-prefixed logging on spdlog: every line reads "[HH:MM:SS.mmm rank R/W level] text".
// Call InitLogging once per process (or per local rank thread group) before logging;
// until then lines carry rank 0/1. Use spdlog's functions (spdlog::info("x={}", x)).
// Thread-safety: spdlog's default logger is thread-safe.
#pragma once

#include <spdlog/spdlog.h>

namespace strata {

void InitLogging(int rank, int world_size);

}  // namespace strata
