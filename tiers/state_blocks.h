// Which blocks of a unit keep 8-bit Adam moments (train.optimizer_states = int8;
// docs/quantization.md, "8-bit Adam states"). The rule, per block of kAdamStateBlock =
// 2048 elements of the unit's flat (padded) buffer: 8-bit when every tensor the block
// overlaps has at least kAdamStateMinElements = 4096 elements (counted in the model, not
// per shard), none of them is a vocabulary-row matrix (TensorSpec::vocab_rows: token
// embeddings and LM heads keep fp32 moments, as bitsandbytes advises), and all of them
// share one weight-decay flag; else fp32. A block of padding
// alone is 8-bit (its master and gradients are zero: every kind of step leaves it so).
// Tensors sit at 16-element offsets, so a block may hold the end of one tensor and the start
// of the next: the first condition keeps a small tensor's moments out of a block absmax
// shared with a large one (bitsandbytes' per-tensor rule, at block grain), the second lets
// one 8-bit step (one AdamParams) cover a whole block. Shards are multiples of 2048
// elements, so every rank's decision for a block is the same.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/quant_format.h"
#include "core/unit_layout.h"
#include "tiers/unit_state.h"

namespace strata {

// The runs of `state` (block-aligned: a shard or the whole padded unit) of `layout`'s
// buffer, in order, with their compact storage slots.
inline std::vector<StateRun> StateRuns(const UnitLayout& layout, ShardRange state) {
  std::vector<StateRun> runs;
  size_t quantized_slot = 0, fp32_slot = 0;
  for (size_t lo = state.begin; lo < state.end; lo += kAdamStateBlock) {
    const size_t hi = std::min(state.end, lo + kAdamStateBlock);
    bool quantized = true, any = false, decay = false;
    for (const TensorSpec& tensor : layout.tensors()) {
      if (tensor.offset >= hi || tensor.offset + tensor.numel <= lo) continue;
      if (tensor.numel < kAdamStateMinElements || tensor.vocab_rows) quantized = false;
      if (any && tensor.weight_decay != decay) quantized = false;
      decay = tensor.weight_decay;
      any = true;
    }
    // Padding alone joins the run before it.
    if (!any) decay = !runs.empty() && runs.back().quantized && runs.back().weight_decay;
    StateRun* last = runs.empty() ? nullptr : &runs.back();
    if (last != nullptr && last->end == lo && last->quantized == quantized &&
        (!quantized || last->weight_decay == decay)) {
      last->end = hi;
    } else {
      runs.push_back(
          {lo, hi, quantized, quantized && decay, quantized ? quantized_slot : fp32_slot});
    }
    (quantized ? quantized_slot : fp32_slot) += hi - lo;
  }
  return runs;
}

// Elements of each kind of storage of `runs`.
struct StateRunElements {
  size_t quantized = 0;
  size_t fp32 = 0;
};
inline StateRunElements CountStateRuns(const std::vector<StateRun>& runs) {
  StateRunElements count;
  for (const StateRun& run : runs)
    (run.quantized ? count.quantized : count.fp32) += run.end - run.begin;
  return count;
}

}  // namespace strata
