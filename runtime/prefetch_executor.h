// The executor of the stage-3 prefetch plan (prefetch_planner.h): the ParamGatherer of
// ZeRO stage 3, where every rank keeps only its param shard (in a ParamHome: device, host
// or nvme) between uses.
//   Acquire(k)  issues the plan's fetches before access k: each gather into a freshly
//               allocated full buffer on the comm stream, after the optimizer's latest
//               update of the shard (host and nvme shards are copied up first, on the copy
//               stream); compute waits only for the unit it needs now.
//   Release(k)  frees what the plan releases after access k, ordered after the compute
//               that used it.
// An access that does not match the plan is a counted deviation (GatherStats), served by an
// on-demand gather, never silently. With shards on nvme a fetch the plan issues ahead waits
// (in plan order) while every read buffer of the home holds a unit fetched but not yet
// used, instead of blocking the host thread; the rule depends on the trace only, so every
// rank issues its gathers in the same order. The host runs at most one access ahead of
// compute, so the plan's budget bounds the gathered bytes that exist at once.
// Thread-safety: driven by the engine's host thread; work goes onto its streams.
#pragma once

#include <memory>

#include "runtime/components.h"
#include "runtime/prefetch_planner.h"
#include "tiers/param_home.h"

namespace strata {

// Plans context.trace within context.prefetch_bytes and returns its executor over
// `params` (the shards; must outlive it). `fresh` carries the optimizer's updates.
StatusOr<std::unique_ptr<ParamGatherer>> CreatePrefetchExecutor(
    const ZeroContext& context, ParamHome* params, std::shared_ptr<FreshParams> fresh);

}  // namespace strata
