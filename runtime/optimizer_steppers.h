// The optimizer steppers: stage 0 steps every unit whole on every rank (identically);
// stages 1-3 step each rank's shard, then stages 1-2 all-gather the updated params into
// every rank's full buffer and stage 3 keeps them as the param shard. The AdamW runs in the
// OptimizerHome given (device, host or nvme); the updated params go to the ParamHome's parts
// (or, on nvme, through the optimizer home's write-back).
// Thread-safety: driven by the engine's host thread; work goes onto its streams.
#pragma once

#include <memory>

#include "runtime/components.h"
#include "tiers/optimizer_home.h"
#include "tiers/param_home.h"

namespace strata {

// The stepper of ZeRO stage `stage` (0-3) over `home` and `params` (both must outlive
// it); `fresh` carries each update to the gatherer's next use of the unit.
StatusOr<std::unique_ptr<OptimizerStepper>> CreateOptimizerStepper(
    const ZeroContext& context, OptimizerHome* home, ParamHome* params,
    std::shared_ptr<FreshParams> fresh, int stage);

}  // namespace strata
