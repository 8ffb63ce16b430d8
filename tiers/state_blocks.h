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
//
// The stored form of one Adam moment over a block-aligned range of a unit with state runs:
// the fp32 runs' values (fp32, in element order), then the quantized runs' codes (one byte
// per element, in element order), then their blocks' absmaxes (fp32, one per block, a last
// partial block counted), little-endian, each section packed. Element order is kept within
// each section, so the form of a block-aligned sub-range is a slice of each section. It is
// what a UnitState holds over its state range (exp_avg or exp_avg_sq, m_codes or v_codes,
// m_absmax or v_absmax), what an NVMe chunk's moment extent holds, and what a checkpoint's
// 8-bit moment array holds (docs/checkpoints.md).
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

// The sections of a moment's stored form over `runs` (the runs of one range, slots from the
// range's start as StateRuns gives them: every function here takes runs so numbered).
struct MomentSections {
  size_t fp32 = 0;    // elements of fp32 runs
  size_t codes = 0;   // elements of quantized runs
  size_t blocks = 0;  // their blocks (absmaxes)
  size_t codes_offset() const { return fp32 * 4; }
  size_t absmax_offset() const { return fp32 * 4 + codes; }
  size_t bytes() const { return fp32 * 4 + codes + blocks * 4; }
};
MomentSections SectionsOf(const std::vector<StateRun>& runs);

// One moment (m: `is_signed`, v: not) in stored form over `runs` (SectionsOf(runs).bytes()
// bytes at `stored`) to and from fp32 values over the runs' range (front().begin to
// back().end): dequantized, or quantized (kernels/cpu/adam8bit.h), where the runs are 8-bit.
void MomentToFp32(const std::vector<StateRun>& runs, bool is_signed, const uint8_t* stored,
                  float* values);
void MomentFromFp32(const std::vector<StateRun>& runs, bool is_signed, const float* values,
                    uint8_t* stored);
// The stored form of an all-zero moment over `runs` (fresh states): fp32 zeros, the map's
// code of 0.0 (m: 127, v: 0) and zero absmaxes, as MomentFromFp32 of zeros gives.
void ZeroMoment(const std::vector<StateRun>& runs, bool is_signed, uint8_t* stored);

}  // namespace strata
