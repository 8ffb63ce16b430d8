// The training state of one model unit on one rank, wherever it lives. Which buffers are
// full-size or shards, and in which tier, is decided once by the ZeRO component factory
// (runtime/zero_components.h) from the placement; the homes (tiers/grad_home.h,
// tiers/optimizer_home.h) and components that own the state know. Sizes:
// `padded_elements` (the full unit, padded to `world` equal shards) and `shard_elements`
// (= padded / world).
// Thread-safety: plain data; the engine's host thread owns it, streams use it in order.
#pragma once

#include <cstddef>

#include "device/memory.h"

namespace strata {

struct UnitState {
  // (The params between uses are the ParamHome's: tiers/param_home.h.)
  Buffer grads;       // compute dtype: full, while gradients of the unit are being summed
  Buffer grad_accum;  // fp32 gradient summed over micro-batches: full (0) or own shard
  Buffer master;      // fp32 master weights: full (0) or own shard
  Buffer exp_avg;     // fp32 Adam first moment, like master
  Buffer exp_avg_sq;  // fp32 Adam second moment, like master
  // Host staging of the offloaded optimizer (empty when not needed):
  Buffer grad_landing;   // compute dtype shard: the reduced gradient copied off the device
  Buffer grad_staging;   // fp32 shard: a device grad_accum copied for the CPU optimizer
  Buffer param_staging;  // compute dtype shard: updated params on their way to the device
  size_t padded_elements = 0;
  size_t shard_elements = 0;
};

// Element range [begin, end) of a unit's padded flat buffer.
struct ShardRange {
  size_t begin = 0;
  size_t end = 0;
};

// The range rank `rank` owns.
inline ShardRange OwnedRange(const UnitState& state, int rank) {
  return {rank * state.shard_elements, (rank + 1) * state.shard_elements};
}

}  // namespace strata
