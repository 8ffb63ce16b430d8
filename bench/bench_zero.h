// `strata bench zero` (bench/bench_zero.cc): world 2, step time of ZeRO stages 1-3 against stage 0, and the compute stream's stall.
// Thread-safety: called once, from main.
#pragma once

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

Status RunBenchZero(const BenchArgs& args);

}  // namespace strata
