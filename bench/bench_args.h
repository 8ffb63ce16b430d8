// What every training benchmark takes from the command line: the job (a config file and
// --set overrides, as `strata train` takes them) and how many steps to measure. Each
// `strata bench` command fills one (launch/bench_cli.cc) with its own default of steps.
// Thread-safety: a plain value.
#pragma once

#include <string>
#include <vector>

namespace strata {

struct BenchArgs {
  std::string config_path;        // --config FILE.json
  std::vector<std::string> sets;  // --set section.key=value, in order
  int steps = 3;                  // --steps: measured steps after one warm-up step
};

}  // namespace strata
