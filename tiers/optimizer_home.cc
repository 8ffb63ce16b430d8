// The device and host optimizer homes; see optimizer_home.h.
#include "tiers/optimizer_home.h"

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "tiers/adam_over_range.h"
#include "tiers/state_blocks.h"
#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// Master out of / into a unit's state buffers (any tier): out through the compute stream;
// in, the master through the compute stream and the moments through the comm stream (idle
// outside a step), so that the two run side by side (a CPU device's streams are one thread
// each: an import's stores then use two cores). 8-bit moments cross as fp32: dequantized on
// the way out, quantized on the way in (docs/quantization.md, "8-bit Adam states").

// The code of 0.0 in a moment's map: fresh 8-bit states (QuantizeMoments of zeros).
constexpr int kZeroCode[2] = {127, 0};  // m (signed map), v (unsigned map)

// One moment's storage of a unit with state runs.
struct MomentStorage {
  Buffer* fp32;
  Buffer* codes;
  Buffer* absmax;
  bool is_signed;
};

MomentStorage MomentOf(UnitState& state, int moment) {
  return moment == 0 ? MomentStorage{&state.exp_avg, &state.m_codes, &state.m_absmax, true}
                     : MomentStorage{&state.exp_avg_sq, &state.v_codes, &state.v_absmax, false};
}

// A moment's three buffers and where each sits in its stored form (tiers/state_blocks.h).
std::array<std::pair<Buffer*, size_t>, 3> Sections(UnitState& state, int moment) {
  const MomentSections sections = SectionsOf(state.state_runs);
  const MomentStorage storage = MomentOf(state, moment);
  return {{{storage.fp32, 0},
           {storage.codes, sections.codes_offset()},
           {storage.absmax, sections.absmax_offset()}}};
}

// A moment of a unit with state runs, as fp32 over the whole state range, into `out`.
Status MomentOut(const HomeContext& ctx, UnitState& state, int moment, float* out) {
  std::vector<uint8_t> stored(SectionsOf(state.state_runs).bytes());
  for (const auto& [buffer, at] : Sections(state, moment)) {
    if (buffer->bytes() == 0) continue;
    RETURN_IF_ERROR(
        ctx.device->CopyAsync(stored.data() + at, buffer->data(), buffer->bytes(), *ctx.compute));
  }
  RETURN_IF_ERROR(ctx.compute->Synchronize());
  MomentToFp32(state.state_runs, /*is_signed=*/moment == 0, stored.data(), out);
  return absl::OkStatus();
}

Status CopyStateOut(const HomeContext& ctx, int unit, float* master, float* exp_avg,
                    float* exp_avg_sq) {
  UnitState& state = (*ctx.units)[unit];
  const bool runs = !state.state_runs.empty();
  const std::pair<float*, const Buffer*> arrays[] = {
      {master, &state.master}, {exp_avg, &state.exp_avg}, {exp_avg_sq, &state.exp_avg_sq}};
  for (const auto& [out, buffer] : arrays) {
    if (out == nullptr) continue;
    if (runs && buffer != &state.master) {
      RETURN_IF_ERROR(MomentOut(ctx, state, buffer == &state.exp_avg ? 0 : 1, out));
      continue;
    }
    RETURN_IF_ERROR(ctx.device->CopyAsync(out, buffer->data(), buffer->bytes(), *ctx.compute));
  }
  return ctx.compute->Synchronize();
}

Status Fill(const HomeContext& ctx, Buffer& buffer, int value, Stream& stream) {
  if (buffer.bytes() == 0) return absl::OkStatus();
  // A dry run's host tier is untouched address space: the device's memset counts it.
  if (buffer.tier() == Tier::kHost && ctx.device->HostAccessible(Tier::kHost)) {
    std::memset(buffer.data(), value, buffer.bytes());
    return absl::OkStatus();
  }
  return ctx.device->MemsetAsync(buffer.data(), value, buffer.bytes(), stream);
}

Status Zero(const HomeContext& ctx, Buffer& buffer, Stream& stream) {
  return Fill(ctx, buffer, 0, stream);
}

// A moment of a unit with state runs from fp32 `values` over the whole state range (null:
// zeros), quantized where the runs say, through host arrays `staged` (which must live until
// `stream` has copied them).
Status MomentIn(const HomeContext& ctx, UnitState& state, int moment, const float* values,
                Stream& stream, std::vector<std::vector<uint8_t>>& staged) {
  const MomentStorage storage = MomentOf(state, moment);
  if (values == nullptr) {
    RETURN_IF_ERROR(Zero(ctx, *storage.fp32, stream));
    RETURN_IF_ERROR(Fill(ctx, *storage.codes, kZeroCode[moment], stream));
    return Zero(ctx, *storage.absmax, stream);
  }
  std::vector<uint8_t>& stored = staged.emplace_back(SectionsOf(state.state_runs).bytes());
  MomentFromFp32(state.state_runs, storage.is_signed, values, stored.data());
  for (const auto& [buffer, at] : Sections(state, moment)) {
    if (buffer->bytes() == 0) continue;
    RETURN_IF_ERROR(
        ctx.device->CopyAsync(buffer->data(), stored.data() + at, buffer->bytes(), stream));
  }
  return absl::OkStatus();
}

// Moments not given are zeroed, unless `moments_zero` says they still are.
Status CopyStateIn(const HomeContext& ctx, int unit, const float* master,
                   const float* exp_avg, const float* exp_avg_sq, bool moments_zero) {
  UnitState& state = (*ctx.units)[unit];
  const bool runs = !state.state_runs.empty();
  std::vector<std::vector<uint8_t>> staged;
  staged.reserve(2);  // MomentIn's arrays stay where they are until the copies are done
  const std::pair<const float*, Buffer*> arrays[] = {
      {master, &state.master}, {exp_avg, &state.exp_avg}, {exp_avg_sq, &state.exp_avg_sq}};
  for (const auto& [values, buffer] : arrays) {
    Stream& stream = buffer == &state.master ? *ctx.compute : *ctx.comm;
    if (values == nullptr && buffer != &state.master && moments_zero) continue;
    if (runs && buffer != &state.master) {
      RETURN_IF_ERROR(
          MomentIn(ctx, state, buffer == &state.exp_avg ? 0 : 1, values, stream, staged));
    } else if (values == nullptr) {
      RETURN_IF_ERROR(Zero(ctx, *buffer, stream));
    } else if (values != buffer->data()) {  // else already in place (EngineState::WriteTargets: master)
      RETURN_IF_ERROR(ctx.device->CopyAsync(buffer->data(), values, buffer->bytes(), stream));
    }
  }
  RETURN_IF_ERROR(ctx.comm->Synchronize());
  return ctx.compute->Synchronize();
}

// The homes whose state sits in a memory tier (device or host): the master is read and
// written through the compute stream; the AdamW sub-steps run (and are waited for) on
// `stream`.
class ResidentOptimizerHome : public OptimizerHome {
 public:
  ResidentOptimizerHome(const HomeContext& ctx, GradHome* grads, ParamHome* params,
                        std::vector<std::unique_ptr<Event>> ready, Stream* stream)
      : ctx_(ctx), grads_(grads), params_(params), ready_(std::move(ready)), stream_(stream),
        moments_zero_(ctx.units->size(), true) {}
  Event& params_ready(int unit) override { return *ready_[unit]; }
  Status WaitSteps() override { return stream_->Synchronize(); }
  double busy_ms() const override { return timer_.ms(); }
  Status ReadState(int unit, float* master, float* exp_avg, float* exp_avg_sq) override {
    return CopyStateOut(ctx_, unit, master, exp_avg, exp_avg_sq);
  }
  Status WriteState(int unit, const float* master, const float* exp_avg,
                    const float* exp_avg_sq) override {
    if (master == nullptr) return absl::InvalidArgumentError("WriteState needs a master");
    Status status = CopyStateIn(ctx_, unit, master, exp_avg, exp_avg_sq, moments_zero_[unit]);
    moments_zero_[unit] = status.ok() && exp_avg == nullptr && exp_avg_sq == nullptr;
    return status;
  }
  Status Flush() override { return absl::OkStatus(); }  // nothing is written back
  Status ReadMoment(int unit, int moment, uint8_t* stored) override {
    return CopyMoment(unit, moment, stored, /*in=*/false);
  }
  Status WriteMoment(int unit, int moment, const uint8_t* stored) override {
    RETURN_IF_ERROR(CopyMoment(unit, moment, const_cast<uint8_t*>(stored), /*in=*/true));
    moments_zero_[unit] = false;
    return absl::OkStatus();
  }

 protected:
  HomeContext ctx_;
  GradHome* grads_;
  ParamHome* params_;
  std::vector<std::unique_ptr<Event>> ready_;  // params in place
  Stream* stream_;
  StreamTimer timer_;
  // The three sections of a moment's stored form to or from its buffers (compute stream).
  Status CopyMoment(int unit, int moment, uint8_t* stored, bool in) {
    UnitState& state = (*ctx_.units)[unit];
    if (state.state_runs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "unit ", unit, " has no 8-bit Adam states (train.optimizer_states=fp32)"));
    }
    for (const auto& [buffer, at] : Sections(state, moment)) {
      if (buffer->bytes() == 0) continue;
      RETURN_IF_ERROR(in ? ctx_.device->CopyAsync(buffer->data(), stored + at, buffer->bytes(),
                                                  *ctx_.compute)
                         : ctx_.device->CopyAsync(stored + at, buffer->data(), buffer->bytes(),
                                                  *ctx_.compute));
    }
    return ctx_.compute->Synchronize();
  }

  // Per unit: its Adam moments are zero (they come zeroed from AllocateState, and stay so
  // until a step; a store without moments then need not zero them again: an import's
  // stores write the master and params alone). Cleared by every step of the unit.
  std::vector<bool> moments_zero_;
};

// AdamW with the backend's kernels on the compute stream.
class DeviceOptimizerHome : public ResidentOptimizerHome {
 public:
  DeviceOptimizerHome(const HomeContext& ctx, GradHome* grads, ParamHome* params,
                      std::vector<std::unique_ptr<Event>> ready)
      : ResidentOptimizerHome(ctx, grads, params, std::move(ready), ctx.compute) {}
  Tier tier() const override { return Tier::kDevice; }

  Status Step(int unit, const AdamParams& params, ShardRange range, size_t state_offset,
              void* param_dest) override {
    Stream& compute = *ctx_.compute;
    RETURN_IF_ERROR(ctx_.device->Wait(compute, grads_->ready(unit)));
    moments_zero_[unit] = false;
    timer_.Start(compute);
    UnitState& state = (*ctx_.units)[unit];
    RETURN_IF_ERROR(AdamOverRange(ctx_, *ctx_.ops, compute, unit, params, range, state_offset,
                                  StateOf(state, state.grad_accum.as<float>()), param_dest));
    timer_.Stop(compute);
    return ctx_.device->Record(*ready_[unit], compute);
  }
};

// The SIMD CPU Adam on the host stream; params copied to the device on the copy stream.
class HostOptimizerHome : public ResidentOptimizerHome, public StagedOptimizerHome {
 public:
  HostOptimizerHome(const HomeContext& ctx, GradHome* grads, ParamHome* params,
                    std::vector<std::unique_ptr<Event>> stepped,
                    std::vector<std::unique_ptr<Event>> ready, std::unique_ptr<Event> join)
      : ResidentOptimizerHome(ctx, grads, params, std::move(ready), ctx.host),
        stepped_(std::move(stepped)), join_(std::move(join)) {}
  Tier tier() const override { return Tier::kHost; }
  // Staged updates go through the param staging buffers, which exist where the params
  // are on the device (host params are written in place).
  StagedOptimizerHome* staged() override {
    return params_->tier() == StateTier::kDevice ? this : nullptr;
  }

  Status Step(int unit, const AdamParams& params, ShardRange range, size_t state_offset,
              void* param_dest) override {
    if (params_->tier() == StateTier::kHost) {
      RETURN_IF_ERROR(Update(unit, params, {range}, state_offset, param_dest, range.begin));
      return ctx_.device->Record(*ready_[unit], *ctx_.host);
    }
    RETURN_IF_ERROR(StepStaged(unit, params, range, state_offset));
    return Publish(unit, {range}, param_dest, range.begin, nullptr);
  }

  Status StepStaged(int unit, const AdamParams& params, ShardRange range,
                    size_t state_offset) override {
    return UpdateStaged(unit, params, {range}, state_offset);
  }

  Status PublishStaged(int unit, ShardRange range, void* param_dest, Stream& after) override {
    return Publish(unit, {range}, param_dest, range.begin, &after);
  }

  Status StepRanges(int unit, const AdamParams& params, const std::vector<ShardRange>& ranges,
                    size_t state_offset, void* param_dest) override {
    RETURN_IF_ERROR(UpdateStaged(unit, params, ranges, state_offset));
    return Publish(unit, ranges, param_dest, state_offset, nullptr);
  }

 private:
  // The AdamW over `ranges` on the host stream, each range's params to `out` + (its begin
  // - `out_origin`) elements (host memory); records stepped_.
  Status Update(int unit, const AdamParams& params, const std::vector<ShardRange>& ranges,
                size_t state_offset, void* out, size_t out_origin) {
    UnitState& state = (*ctx_.units)[unit];
    Device& device = *ctx_.device;
    Stream& host = *ctx_.host;
    Stream& copy = *ctx_.copy;
    const float* grads = state.grad_accum.as<float>();
    if (grads_->tier() != StateTier::kHost) {
      // Sums made on the device: copy this step's to the host first (after the previous
      // step's AdamW is done with the staging buffer).
      RETURN_IF_ERROR(device.Wait(copy, *stepped_[unit]));
      RETURN_IF_ERROR(device.Wait(copy, grads_->ready(unit)));
      RETURN_IF_ERROR(device.CopyAsync(state.grad_staging.data(), state.grad_accum.data(),
                                       state.grad_staging.bytes(), copy));
      RETURN_IF_ERROR(Join(device, host, copy, *join_));
      grads = state.grad_staging.as<float>();
    } else {
      RETURN_IF_ERROR(device.Wait(host, grads_->ready(unit)));
    }
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    moments_zero_[unit] = false;
    timer_.Start(host);
    for (const ShardRange& range : ranges) {
      RETURN_IF_ERROR(AdamOverRange(ctx_, *ctx_.host_ops, host, unit, params, range,
                                    state_offset, StateOf(state, grads),
                                    ElementAt(out, range.begin - out_origin, element_bytes)));
    }
    timer_.Stop(host);
    return device.Record(*stepped_[unit], host);
  }

  // Update into the param staging buffer (from the state offset on), once the unit's
  // previous copy out of it is done.
  Status UpdateStaged(int unit, const AdamParams& params, const std::vector<ShardRange>& ranges,
                      size_t state_offset) {
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    return Update(unit, params, ranges, state_offset, (*ctx_.units)[unit].param_staging.data(),
                  state_offset);
  }

  // The staged params of `ranges` to `param_dest` + (range begin - `origin`) elements on
  // the copy stream, after the unit's last Update and after `after` (if any) has passed
  // what it has enqueued so far; records ready_. `origin` is also where the staging
  // buffer starts (the callers' ranges start at their state offset).
  Status Publish(int unit, const std::vector<ShardRange>& ranges, void* param_dest,
                 size_t origin, Stream* after) {
    Device& device = *ctx_.device;
    Stream& copy = *ctx_.copy;
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    void* staging = (*ctx_.units)[unit].param_staging.data();
    if (after != nullptr) RETURN_IF_ERROR(Join(device, copy, *after, *join_));
    RETURN_IF_ERROR(device.Wait(copy, *stepped_[unit]));
    for (const ShardRange& range : ranges) {
      const size_t at = range.begin - origin;
      RETURN_IF_ERROR(device.CopyAsync(ElementAt(param_dest, at, element_bytes),
                                       ElementAt(staging, at, element_bytes),
                                       (range.end - range.begin) * element_bytes, copy));
    }
    return device.Record(*ready_[unit], copy);
  }

  std::vector<std::unique_ptr<Event>> stepped_;  // AdamW of the unit done (host stream)
  std::unique_ptr<Event> join_;
};

}  // namespace

StatusOr<std::unique_ptr<OptimizerHome>> OptimizerHome::Create(const HomeContext& ctx,
                                                               Tier tier, GradHome* grads,
                                                               ParamHome* params) {
  RETURN_IF_ERROR(CheckHomeContext(ctx));
  if (grads == nullptr || params == nullptr) {
    return absl::InvalidArgumentError("an optimizer home needs a grad home and a param home");
  }
  const size_t units = ctx.units->size();
  ASSIGN_OR_RETURN(auto ready, MakeEvents(*ctx.device, units));
  if (tier == Tier::kDevice) {
    if (grads->tier() != StateTier::kDevice || params->tier() != StateTier::kDevice) {
      return absl::InvalidArgumentError(
          "an optimizer on the device reads gradients and writes params on the device: set "
          "zero.grad_tier=device and zero.param_tier=device, or zero.optimizer_tier=host");
    }
    return std::unique_ptr<OptimizerHome>(
        new DeviceOptimizerHome(ctx, grads, params, std::move(ready)));
  }
  ASSIGN_OR_RETURN(auto stepped, MakeEvents(*ctx.device, units));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
  return std::unique_ptr<OptimizerHome>(new HostOptimizerHome(
      ctx, grads, params, std::move(stepped), std::move(ready), std::move(join)));
}

}  // namespace strata
