// Rank-prefixed spdlog pattern; see logging.h.
#include "core/logging.h"

#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace strata {

void InitLogging(int rank, int world_size) {
  std::string name = "strata-" + std::to_string(rank);
  auto logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_color_mt(name);
  logger->set_pattern("[%H:%M:%S.%e rank " + std::to_string(rank) + "/" +
                      std::to_string(world_size) + " %l] %v");
  spdlog::set_default_logger(logger);
}

}  // namespace strata
