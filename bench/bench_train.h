// `strata bench train` (bench/bench_train.cc): forward / backward / optimizer split, tokens/s and GFLOP/s against the measured FMA peak, fp32 and bf16 alternately.
// Thread-safety: called once, from main.
#pragma once

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

Status RunBenchTrain(const BenchArgs& args);

}  // namespace strata
