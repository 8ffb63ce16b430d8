// `strata bench trace` (bench/bench_trace.cc): the timeline trace's cost, step time without it, with it off and on.
// Thread-safety: called once, from main.
#pragma once

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

Status RunBenchTrace(const BenchArgs& args);

}  // namespace strata
