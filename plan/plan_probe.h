// This machine's rates for `strata plan --hardware probe` (plan/plan.h): GEMM FLOP/s in
// fp32 and bf16 through the CPU backend's kernels, the CPU Adam's params/s, memcpy (the CPU
// backend's device tier, copies and ranks-as-threads are all RAM), and O_DIRECT sequential
// write and read of zero.nvme_dir's disk (when set). A few seconds in all.
// Thread-safety: plain function (it creates CPU backends of its own).
#pragma once

#include <array>
#include <map>
#include <string>
#include <utility>

#include "core/options.h"
#include "core/status.h"
#include "plan/hardware.h"

namespace strata {

StatusOr<Hardware> ProbeHardware(const Options& job, int world);
// The directory whose disk a probe measures (zero.nvme_dir, else $TMPDIR or /tmp), and the
// probe's `source` text ("probe of <cpu>, disk of <dir>": a cached probe is reused only for
// the same CPU and directory).
std::string ProbeDiskDir(const Options& job);
// This machine's memory for `job` at `world` ranks into *hw (device tier as the job
// resolves it, usable RAM, ranks per node): a cached probe's rates with today's job.
Status FillMachineMemory(const Options& job, int world, Hardware* hw);
std::string ProbeSource(const Options& job);

// Seconds per call of each GEMM, attention and compute-bound elementwise shape a dry run
// counted
// (OpCounts::shapes), timed on this machine with the CPU backend's kernels in `dtype`, each
// shape once (cached). A shape of more than ~2e10 FLOPs is timed at fewer rows (N, or B for
// attention) and scaled, since the rate barely changes past that size.
class ShapeTimer {
 public:
  explicit ShapeTimer(const Options& job) : job_(job) {}
  StatusOr<double> SecondsPerCall(DType dtype, const std::array<int, 6>& shape);

 private:
  // The elementwise kinds (cross-entropy, GELU, layernorm), timed at up to 2^26 elements.
  StatusOr<double> TimeElementwise(DType dtype, const std::array<int, 6>& shape,
                                   const std::pair<int, std::array<int, 6>>& key);
  Options job_;
  std::map<std::pair<int, std::array<int, 6>>, double> seconds_;
};

}  // namespace strata
