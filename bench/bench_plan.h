// `strata bench plan [--dir DIR]` (bench/bench_plan.cc): strata plan's predicted step time and peaks against runs of each configuration (goal: within 20%).
// Thread-safety: called once, from main.
#pragma once

#include <string>

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

// `nvme_dir`: zero.nvme_dir for the NVMe configurations ("" skips them).
Status RunBenchPlan(const BenchArgs& args, const std::string& nvme_dir);

}  // namespace strata
