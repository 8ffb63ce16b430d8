// `strata bench infinity --dir DIR` (bench/bench_infinity.cc): optimizer and params on NVMe,
// step time against the disk's rates measured in the same run, and the compute stall; 8-bit
// Adam states against fp32 ones with the optimizer on NVMe.
// Thread-safety: called once, from main.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

// `dir`: where the swap files go (an SSD). `states_only`: the 8-bit states comparison alone.
Status RunBenchInfinity(const BenchArgs& args, const std::string& dir, bool states_only = false);

// train.optimizer_states=int8 against fp32 with the optimizer on NVMe and the gradients on
// the host (stage 2, one rank): `pairs` pairs of runs of `args.steps` measured steps each, the
// two kinds alternating (which goes first swaps from pair to pair: the machine's speed
// drifts), each run in a session of its own. Ratios are int8 / fp32 within a pair.
struct StatesComparison {
  std::vector<double> bytes_ratios, time_ratios;  // per pair
  double bytes_ratio = 0, time_ratio = 0;         // medians
  double fp32_ms = 0, int8_ms = 0;                // per step, medians
  double fp32_bytes = 0, int8_bytes = 0;          // read + written per step, last pair
  // The fp32 runs' disk busy time / step time (median): near 1 where the disk is the bound.
  double fp32_disk_share = 0;
  double int8_disk_share = 0;
  double fp32_adam_ms = 0, int8_adam_ms = 0;  // the CPU Adam's time per step (medians)
  // From the model's layout: state elements whose moments stay fp32 (tiers/state_blocks.h),
  // and the bytes ratio they give ((4 + moments) / 12 per element, extents' 4 KiB padding
  // aside).
  double fp32_moment_share = 0;
  double layout_bytes_ratio = 0;
};
// `base`: the job's --set lines (model, batch, nvme_dir...).
StatusOr<StatesComparison> CompareOptimizerStates(const BenchArgs& args,
                                                  const std::vector<std::string>& base,
                                                  int pairs);
// The comparison's report lines, goals included (bytes <= 0.55x; time <= 0.65x where the
// fp32 step is disk-bound), each goal missed with the reason.
std::string DescribeStatesComparison(const StatesComparison& c);

}  // namespace strata
