// The AdamW sub-step over a range of a unit, tensor by tensor, shared by the optimizer
// homes (tiers/optimizer_home.cc, tiers/nvme_optimizer_home.cc). Internal to tiers/.
#pragma once

#include <algorithm>
#include <vector>

#include "tiers/home_context.h"

namespace strata {

// The fp32 state one AdamW sub-step works on; each pointer is the unit element at
// `state_offset` (see AdamOverRange).
struct AdamState {
  float* master;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
};

inline AdamState StateOf(UnitState& state, const float* grads) {
  return {state.master.as<float>(), grads, state.exp_avg.as<float>(),
          state.exp_avg_sq.as<float>()};
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
  for (const TensorSpec& tensor : (*ctx.layouts)[unit].tensors()) {
    const size_t lo = std::max(range.begin, tensor.offset);
    const size_t hi = std::min(range.end, tensor.offset + tensor.numel);
    if (lo >= hi) continue;
    AdamParams tensor_params = params;
    if (!tensor.weight_decay) tensor_params.weight_decay = 0.0f;
    const size_t s = lo - state_offset;
    void* param =
        param_base == nullptr ? nullptr : ElementAt(param_base, lo - range.begin, element_bytes);
    RETURN_IF_ERROR(ops.AdamW(stream, param, state.master + s, state.grads + s, state.exp_avg + s,
                              state.exp_avg_sq + s, hi - lo, tensor_params));
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
