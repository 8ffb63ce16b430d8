// The gradient reducers: stage 0 all-reduces each unit's full gradients (rank-order sum)
// into full fp32 sums after the backward; stage 1 reduce-scatters every unit to its owner
// after the backward; stages 2-3 reduce-scatter each unit as soon as its backward is done,
// overlapped with the next units, and free its full buffer. The sums go to the GradHome
// given (device, host or nvme).
// Thread-safety: driven by the engine's host thread; work goes onto its streams.
#pragma once

#include <memory>

#include "runtime/components.h"
#include "tiers/grad_home.h"

namespace strata {

// The reducer of ZeRO stage `stage` (0-3) over `home` (must outlive it).
StatusOr<std::unique_ptr<GradientReducer>> CreateGradientReducer(const ZeroContext& context,
                                                                 GradHome* home, int stage);

}  // namespace strata
