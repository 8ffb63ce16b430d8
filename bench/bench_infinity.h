// `strata bench infinity --dir DIR` (bench/bench_infinity.cc): optimizer and params on NVMe, step time against the disk's rates measured in the same run, and the compute stall.
// Thread-safety: called once, from main.
#pragma once

#include <string>

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

// `dir`: where the swap files go (an SSD).
Status RunBenchInfinity(const BenchArgs& args, const std::string& dir);

}  // namespace strata
