// The AdamW sub-step over a range of a unit, tensor by tensor, shared by the optimizer
// homes (tiers/optimizer_home.cc, tiers/nvme_optimizer_home.cc). Internal to tiers/.
#pragma once

#include <algorithm>
#include <vector>

#include "core/quant_format.h"
#include "tiers/home_context.h"

namespace strata {

// The fp32 state one AdamW sub-step works on; each pointer is the unit element at
// `state_offset` (see AdamOverRange).
// With `runs` (8-bit states), exp_avg/exp_avg_sq are the fp32 runs' compact storage and the
// codes/absmaxes the quantized runs' (see tiers/unit_state.h).
struct AdamState {
  float* master;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
  const std::vector<StateRun>* runs = nullptr;  // null or empty: fp32 moments throughout
  uint8_t* m_codes = nullptr;
  float* m_absmax = nullptr;
  uint8_t* v_codes = nullptr;
  float* v_absmax = nullptr;
};

inline AdamState StateOf(UnitState& state, const float* grads) {
  return {state.master.as<float>(),     grads,
          state.exp_avg.as<float>(),    state.exp_avg_sq.as<float>(),
          &state.state_runs,            state.m_codes.as<uint8_t>(),
          state.m_absmax.as<float>(),   state.v_codes.as<uint8_t>(),
          state.v_absmax.as<float>()};
}

// AdamW over the unit elements [lo, hi) tensor by tensor; the fp32 moments of element e are
// at moments + (e - moments_origin).
inline Status AdamOverTensors(const UnitLayout& layout, Ops& ops, Stream& stream,
                              const AdamParams& params, size_t lo_range, size_t hi_range,
                              size_t state_offset, const AdamState& state, size_t moments_origin,
                              void* param_base, size_t param_origin, size_t element_bytes) {
  for (const TensorSpec& tensor : layout.tensors()) {
    const size_t lo = std::max(lo_range, tensor.offset);
    const size_t hi = std::min(hi_range, tensor.offset + tensor.numel);
    if (lo >= hi) continue;
    AdamParams tensor_params = params;
    if (!tensor.weight_decay) tensor_params.weight_decay = 0.0f;
    const size_t s = lo - state_offset;
    const size_t m = lo - moments_origin;
    void* param =
        param_base == nullptr ? nullptr : ElementAt(param_base, lo - param_origin, element_bytes);
    RETURN_IF_ERROR(ops.AdamW(stream, param, state.master + s, state.grads + s,
                              state.exp_avg + m, state.exp_avg_sq + m, hi - lo, tensor_params));
  }
  return absl::OkStatus();
}

// Runs AdamW over `range` of a unit tensor by tensor on `ops`/`stream`; `param_base` is the
// params' element at range.begin. Params that are the master itself (an fp32 engine's
// shared buffer, ParamHome::CreateResident) are updated with it, not written twice.
inline Status AdamOverRange(const HomeContext& ctx, Ops& ops, Stream& stream, int unit,
                     const AdamParams& params, ShardRange range, size_t state_offset,
                     const AdamState& state, void* param_base) {
  const size_t element_bytes = DTypeBytes(ctx.dtype);
  if (param_base == static_cast<void*>(state.master + (range.begin - state_offset))) {
    param_base = nullptr;
  }
  StreamLabel label(stream, "adam " + (*ctx.layouts)[unit].name(), "adam",
                    {{"elements", std::to_string(range.end - range.begin)}});
  const UnitLayout& layout = (*ctx.layouts)[unit];
  if (state.runs == nullptr || state.runs->empty()) {
    return AdamOverTensors(layout, ops, stream, params, range.begin, range.end, state_offset,
                           state, state_offset, param_base, range.begin, element_bytes);
  }
  // 8-bit states: run by run; a quantized run's blocks are stepped whole (their absmaxes
  // cover the whole block), with the run's weight-decay flag.
  for (const StateRun& run : *state.runs) {
    const size_t lo = std::max(range.begin, run.begin);
    const size_t hi = std::min(range.end, run.end);
    if (lo >= hi) continue;
    if (!run.quantized) {
      RETURN_IF_ERROR(AdamOverTensors(layout, ops, stream, params, lo, hi, state_offset, state,
                                      run.begin - run.slot, param_base, range.begin,
                                      element_bytes));
      continue;
    }
    if ((lo - run.begin) % kAdamStateBlock != 0 || ((hi - run.begin) % kAdamStateBlock != 0 &&
                                                    hi != run.end)) {
      return absl::InternalError(absl::StrCat(
          "adam over ", layout.name(), " elements [", range.begin, ", ", range.end,
          ") cuts an 8-bit state block (train.optimizer_states=int8 steps whole blocks)"));
    }
    AdamParams run_params = params;
    if (!run.weight_decay) run_params.weight_decay = 0.0f;
    const size_t s = lo - state_offset;
    const size_t code = run.slot + (lo - run.begin);
    const size_t block = code / kAdamStateBlock;
    void* param =
        param_base == nullptr ? nullptr : ElementAt(param_base, lo - range.begin, element_bytes);
    RETURN_IF_ERROR(ops.AdamW8bit(stream, param, state.master + s, state.grads + s,
                                  state.m_codes + code, state.m_absmax + block,
                                  state.v_codes + code, state.v_absmax + block, hi - lo,
                                  run_params));
  }
  return absl::OkStatus();
}

// The element ranges of `range` (relative to range.begin) that belong to no tensor of
// `layout`: alignment gaps and padding, which AdamW leaves alone.
inline std::vector<ShardRange> GapRanges(const UnitLayout& layout, ShardRange range) {
  std::vector<ShardRange> gaps;
  size_t at = range.begin;
  for (const TensorSpec& tensor : layout.tensors()) {
    const size_t lo = std::max(range.begin, tensor.offset);
    const size_t hi = std::min(range.end, tensor.offset + tensor.numel);
    if (lo >= hi) continue;
    if (lo > at) gaps.push_back({at - range.begin, lo - range.begin});
    at = hi;
  }
  if (at < range.end) gaps.push_back({at - range.begin, range.end - range.begin});
  return gaps;
}

}  // namespace strata
