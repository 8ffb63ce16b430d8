// Placement: where each kind of training state lives and which special modes a run uses,
// resolved once from the options into types. The legality rules live here and only here:
// the option checks (config/option_checks.cc) list PlacementProblems with every other
// problem, and the engine and the ZeRO component factory build from the Placement that
// ResolvePlacement returns, asking it what they may do (its capabilities) instead of
// reading option values.
// Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/options.h"
#include "core/status.h"

namespace strata {

struct Placement {
  int stage = 0;  // zero.stage
  int world = 1;  // ranks of the run
  // Homes of the fp32 master and Adam moments, the fp32 gradient sums, and the param
  // shards between uses (stage 3; kDevice below: every rank keeps the full params there).
  StateTier optimizer = StateTier::kDevice;
  StateTier grads = StateTier::kDevice;
  StateTier params = StateTier::kDevice;
  // A frozen base (LoRA): units with no gradient sums and no optimizer state, whose params
  // live in `frozen_params` (stage 3 only off the device), apart from the trainable ones.
  bool frozen = false;
  StateTier frozen_params = StateTier::kDevice;
  ParamUpdate update = ParamUpdate::kExact;
  bool clipping = false;  // train.grad_clip > 0: every sub-step waits for the global norm
  // train.optimizer_states: the Adam moments in fp32 or (int8) blockwise 8-bit where the
  // block rule allows (tiers/state_blocks.h); device and host optimizer tiers only.
  OptimizerStates states = OptimizerStates::kFp32;

  // What the stage implies (docs/placement.md: stages are component choices).
  bool sharded_state() const { return stage >= 1; }    // optimizer state and grad sums
  bool per_unit_reduction() const { return stage >= 2; }  // reduce-scatter per unit
  bool sharded_params() const { return stage == 3; }
  // The optimizer steps on the host stream (CPU Adam): its state on host or nvme.
  bool cpu_optimizer() const { return optimizer != StateTier::kDevice; }
  bool delayed() const { return update == ParamUpdate::kDelayed; }

  // Capabilities the engine consults.
  // A unit's optimizer sub-step may start on the step's last micro-batch as soon as its
  // gradient sum is final, overlapped with the rest of backward: a CPU optimizer, no
  // clipping (the scale is known before backward), exact updates.
  bool early_step = false;
  // A tied unit's sub-step may be split (the elements final before its last backward
  // stage stepped first): early steps, one rank (nothing to reduce over ranks), per-unit
  // reductions, sums and optimizer in the host tier, params on the device (with 8-bit
  // states the late ranges grow to whole blocks, which are stepped whole).
  bool split_tied = false;
  // The NVMe gradient home may hand each final sum to the optimizer in memory: early steps
  // with per-unit reductions and the sums on nvme.
  bool nvme_handover = false;
};

// Every problem of the placement keys (zero.optimizer_tier, grad_tier, param_tier,
// param_update, nvme_dir) in combination with zero.stage, one line each naming the keys and
// the fix. Empty: the placement can run.
std::vector<std::string> PlacementProblems(const Options& options);

// The placement of `options` for a run of `world` ranks (under mpirun that is mpirun's
// world, not zero.world); InvalidArgument with every PlacementProblems line otherwise.
StatusOr<Placement> ResolvePlacement(const Options& options, int world);

}  // namespace strata
