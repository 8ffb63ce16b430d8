// The training state of one model unit on one rank, wherever it lives. Which buffers are
// full-size or shards, and in which tier, is decided once by the ZeRO component factory
// (runtime/zero_components.h) from the placement; the homes (tiers/grad_home.h,
// tiers/optimizer_home.h) and components that own the state know. Sizes:
// `padded_elements` (the full unit, padded to `world` equal shards) and `shard_elements`
// (= padded / world). With 8-bit Adam states (train.optimizer_states = int8) the state range
// is cut into runs of whole 2048-element blocks (tiers/state_blocks.h): a quantized run's
// moments are codes + block absmaxes, the others' fp32; each kind is stored compactly, runs
// one after another in unit order.
// Thread-safety: plain data; the engine's host thread owns it, streams use it in order.
#pragma once

#include <cstddef>
#include <vector>

#include "device/memory.h"

namespace strata {

// A run of whole kAdamStateBlock blocks of a unit's state range with one kind of Adam
// moments (tiers/state_blocks.h decides).
struct StateRun {
  size_t begin = 0;  // unit elements, on block boundaries (end: or the unit's padded end)
  size_t end = 0;
  bool quantized = false;     // 8-bit moments (else fp32)
  bool weight_decay = false;  // quantized runs: AdamW decay of every element of the run
  // The run's first element in its kind's storage: in m_codes/v_codes (quantized; its
  // first block's absmaxes at slot / kAdamStateBlock) or in exp_avg/exp_avg_sq.
  size_t slot = 0;
};

struct UnitState {
  // (The params between uses are the ParamHome's: tiers/param_home.h.)
  Buffer grads;       // compute dtype: full, while gradients of the unit are being summed
  Buffer grad_accum;  // fp32 gradient summed over micro-batches: full (0) or own shard
  Buffer master;      // fp32 master weights: full (0) or own shard
  Buffer exp_avg;     // fp32 Adam first moment, like master (with state_runs: fp32 runs')
  Buffer exp_avg_sq;  // fp32 Adam second moment, like master (with state_runs: fp32 runs')
  // 8-bit Adam moments of the quantized state runs, in master's tier: uint8 codes per
  // element (m: signed map, v: unsigned) and fp32 absmaxes per block.
  Buffer m_codes, v_codes;
  Buffer m_absmax, v_absmax;
  // Empty: fp32 moments over the whole state range (train.optimizer_states = fp32).
  std::vector<StateRun> state_runs;
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
