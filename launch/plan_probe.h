// This machine's rates for `strata plan --hardware probe` (launch/plan.h): GEMM FLOP/s in
// fp32 and bf16 through the CPU backend's kernels, the CPU Adam's params/s, memcpy (the CPU
// backend's device tier, copies and ranks-as-threads are all RAM), and O_DIRECT sequential
// write and read of zero.nvme_dir's disk (when set). A few seconds in all.
// Thread-safety: plain function (it creates CPU backends of its own).
#pragma once

#include "core/options.h"
#include "launch/plan.h"

namespace strata {

StatusOr<Hardware> ProbeHardware(const Options& job, int world);

}  // namespace strata
