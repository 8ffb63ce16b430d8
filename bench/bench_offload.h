// `strata bench offload` (bench/bench_offload.cc): the optimizer on the host against on the device: step time and exposed optimizer time.
// Thread-safety: called once, from main.
#pragma once

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

Status RunBenchOffload(const BenchArgs& args);

}  // namespace strata
