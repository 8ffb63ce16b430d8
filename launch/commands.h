// The `strata` subcommands. Each returns a Status; main() prints a failure and exits 1.
// Thread-safety: called once from main.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace strata {

struct CommandArgs {
  std::string config_path;          // --config FILE.json
  std::vector<std::string> sets;    // --set section.key=value, in order
  std::string metrics_path;         // --metrics FILE.jsonl
  int bench_steps = 3;              // bench: measured steps after one warm-up step
};

Status RunTrain(const CommandArgs& args);
Status RunBenchTrain(const CommandArgs& args);
Status RunBenchZero(const CommandArgs& args);
Status RunBenchOffload(const CommandArgs& args);
// `strata bench nvme --dir DIR [--size 1GiB] [--engine auto]`: nvme/disk_bench.h.
Status RunBenchNvme(const std::string& dir, const std::string& size, const std::string& engine);

}  // namespace strata
