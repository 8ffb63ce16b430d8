// The device and host gradient homes; see grad_home.h.
#include "tiers/grad_home.h"

#include <cstring>
#include <memory>

#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// A unit's resident fp32 sums (grad_accum, any tier) out to host memory, blocking.
Status CopySumsOut(const HomeContext& ctx, int unit, float* out) {
  const Buffer& sums = (*ctx.units)[unit].grad_accum;
  RETURN_IF_ERROR(ctx.device->CopyAsync(out, sums.data(), sums.bytes(), *ctx.compute));
  return ctx.compute->Synchronize();
}

// Sums on the stream that produced the reduced gradient (comm), in device memory.
class DeviceGradHome : public GradHome {
 public:
  DeviceGradHome(const HomeContext& ctx, std::vector<std::unique_ptr<Event>> ready,
                 std::unique_ptr<Event> join)
      : ctx_(ctx), ready_(std::move(ready)), join_(std::move(join)) {}
  StateTier tier() const override { return StateTier::kDevice; }

  StatusOr<Stream*> Add(int unit, const void* src, Stream& producer) override {
    UnitState& state = (*ctx_.units)[unit];
    const size_t n = state.grad_accum.bytes() / sizeof(float);
    RETURN_IF_ERROR(ctx_.ops->AccumulateToFloat(producer, state.grad_accum.as<float>(), src, n));
    RETURN_IF_ERROR(ctx_.device->Record(*ready_[unit], producer));
    return &producer;
  }

  Status Zero() override {
    // Readers: the optimizer on compute, or the copy to a host optimizer.
    RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.comm, *ctx_.compute, *join_));
    RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.comm, *ctx_.copy, *join_));
    for (UnitState& state : *ctx_.units) {
      if (state.grad_accum.bytes() == 0) continue;  // a frozen unit
      RETURN_IF_ERROR(ctx_.device->MemsetAsync(state.grad_accum.data(), 0,
                                               state.grad_accum.bytes(), *ctx_.comm));
    }
    return absl::OkStatus();
  }

  Status SquaredNorm(int unit, size_t first, size_t n, float* out_device) override {
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.compute, *ready_[unit]));
    return ctx_.ops->SumSquares(*ctx_.compute, out_device,
                                (*ctx_.units)[unit].grad_accum.as<float>() + first, n);
  }

  Event& ready(int unit) override { return *ready_[unit]; }
  Status ReadSums(int unit, float* out) override { return CopySumsOut(ctx_, unit, out); }

 private:
  HomeContext ctx_;
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
};

// Reduced gradients copied to the host as they come, summed there by the CPU kernels.
class HostGradHome : public GradHome, public RangedGradHome {
 public:
  HostGradHome(const HomeContext& ctx, std::vector<std::unique_ptr<Event>> ready,
               std::unique_ptr<Event> join, std::unique_ptr<Event> zeroed, Buffer norms,
               Buffer range_norms)
      : ctx_(ctx), ready_(std::move(ready)), join_(std::move(join)), zeroed_(std::move(zeroed)),
        norms_(std::move(norms)), range_norms_(std::move(range_norms)),
        first_(ctx.units->size(), true), zeroed_early_(ctx.units->size(), false) {}
  StateTier tier() const override { return StateTier::kHost; }
  RangedGradHome* ranged() override { return this; }

  StatusOr<Stream*> Add(int unit, const void* src, Stream& producer) override {
    const size_t n = (*ctx_.units)[unit].grad_accum.bytes() / sizeof(float);
    RETURN_IF_ERROR(AddRanges(unit, src, {{0, n}}, producer, /*last_part=*/true));
    return ctx_.copy;  // the last reader of `src`
  }

  Status Zero() override {
    // Each unit's sum starts over at its first Add; the copy that lands there waits for
    // the host stream (the previous step's CPU optimizer, which read the sums).
    first_.assign(ctx_.units->size(), true);
    RETURN_IF_ERROR(ctx_.device->Record(*zeroed_, *ctx_.host));
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.copy, *zeroed_));
    return absl::OkStatus();
  }

  Status AddRanges(int unit, const void* src,
                   const std::vector<ShardRange>& ranges, Stream& producer,
                   bool last_part) override {
    UnitState& state = (*ctx_.units)[unit];
    Stream& copy = *ctx_.copy;
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    // The landing buffer is free once the previous micro-batch's sum has read it (and the
    // sum itself once the previous step's optimizer has: Zero orders that).
    RETURN_IF_ERROR(ctx_.device->Wait(copy, *ready_[unit]));
    RETURN_IF_ERROR(Join(*ctx_.device, copy, producer, *join_));
    const bool first = first_[unit];
    if (last_part) first_[unit] = false;
    float* sum = state.grad_accum.as<float>();
    if (first && ctx_.dtype == DType::kF32) {
      // The step's first fp32 gradient lands as the sum itself (0 + x == x): one pass over
      // host memory fewer where the unit's last gradient is the one backward ends on.
      for (const ShardRange& range : ranges) {
        RETURN_IF_ERROR(ctx_.device->CopyAsync(
            sum + range.begin, static_cast<const float*>(src) + range.begin,
            (range.end - range.begin) * sizeof(float), copy));
      }
      return ctx_.device->Record(*ready_[unit], copy);
    }
    if (first && !zeroed_early_[unit]) {
      zeroed_early_[unit] = true;  // both parts sum into it: zero it once
      RETURN_IF_ERROR(ZeroOnHost(state));
    }
    if (last_part) zeroed_early_[unit] = false;
    for (const ShardRange& range : ranges) {
      RETURN_IF_ERROR(
          ctx_.device->CopyAsync(ElementAt(state.grad_landing.data(), range.begin, element_bytes),
                                 ElementAt(const_cast<void*>(src), range.begin, element_bytes),
                                 (range.end - range.begin) * element_bytes, copy));
    }
    RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.host, copy, *join_));
    for (const ShardRange& range : ranges) {
      RETURN_IF_ERROR(ctx_.host_ops->AccumulateToFloat(
          *ctx_.host, sum + range.begin, ElementAt(state.grad_landing.data(), range.begin, element_bytes),
          range.end - range.begin));
    }
    return ctx_.device->Record(*ready_[unit], *ctx_.host);
  }

  Status SquaredNormRanges(int unit, const std::vector<ShardRange>& ranges,
                           float* out_device) override {
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    // Its own slot (a unit's early and late parts may both be pending on the stream).
    float* partial = range_norms_.as<float>() + (range_norm_uses_++ % 2) * ctx_.units->size() +
                     unit;
    const float* sum = (*ctx_.units)[unit].grad_accum.as<float>();
    // One part per range, then their sum in range order (the parts live until then).
    auto parts = std::make_shared<std::vector<float>>(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      RETURN_IF_ERROR(ctx_.host_ops->SumSquares(*ctx_.host, parts->data() + i,
                                                sum + ranges[i].begin,
                                                ranges[i].end - ranges[i].begin));
    }
    ctx_.host->EnqueueHost([partial, parts] {
      double total = 0.0;
      for (float part : *parts) total += part;
      *partial = static_cast<float>(total);
      return absl::OkStatus();
    });
    return ctx_.device->CopyAsync(out_device, partial, sizeof(float), *ctx_.host);
  }

  Status SquaredNorm(int unit, size_t first, size_t n, float* out_device) override {
    float* partial = norms_.as<float>() + unit;
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    RETURN_IF_ERROR(ctx_.host_ops->SumSquares(
        *ctx_.host, partial, (*ctx_.units)[unit].grad_accum.as<float>() + first, n));
    return ctx_.device->CopyAsync(out_device, partial, sizeof(float), *ctx_.host);
  }

  Event& ready(int unit) override { return *ready_[unit]; }
  Status ReadSums(int unit, float* out) override {
    RETURN_IF_ERROR(ctx_.host->Synchronize());
    return CopySumsOut(ctx_, unit, out);
  }

 private:
  // A unit's sum zeroed in host-stream order (before the host stream sums into it).
  Status ZeroOnHost(UnitState& state) {
    void* data = state.grad_accum.data();
    const size_t bytes = state.grad_accum.bytes();
    // A dry run's host tier is untouched address space: the device's memset counts it.
    if (!ctx_.device->HostAccessible(Tier::kHost)) {
      return ctx_.device->MemsetAsync(data, 0, bytes, *ctx_.host);
    }
    ctx_.host->EnqueueHost([data, bytes] {
      std::memset(data, 0, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  HomeContext ctx_;
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
  std::unique_ptr<Event> zeroed_;  // Zero's point on the host stream
  Buffer norms_;  // [units] fp32 partial sums, host tier
  Buffer range_norms_;  // [2][units]: SquaredNormRanges' partial sums, alternating
  size_t range_norm_uses_ = 0;
  std::vector<bool> first_;  // per unit: no Add since Zero
  std::vector<bool> zeroed_early_;  // per unit: zeroed by the first part of AddRanges
};

}  // namespace

StatusOr<std::unique_ptr<GradHome>> GradHome::Create(const HomeContext& ctx, Tier tier) {
  RETURN_IF_ERROR(CheckHomeContext(ctx));
  const size_t units = ctx.units->size();
  ASSIGN_OR_RETURN(auto ready, MakeEvents(*ctx.device, units));
  if (tier == Tier::kDevice) {
    ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
    return std::unique_ptr<GradHome>(new DeviceGradHome(ctx, std::move(ready), std::move(join)));
  }
  for (size_t u = 0; u < units; ++u) {
    if (!(*ctx.layouts)[u].trainable()) continue;  // no gradient sums
    const UnitState& state = (*ctx.units)[u];
    const size_t n = state.grad_accum.bytes() / sizeof(float);
    if (state.grad_accum.tier() != Tier::kHost ||
        state.grad_landing.bytes() < n * DTypeBytes(ctx.dtype)) {
      return absl::InternalError(absl::StrCat("unit ", (*ctx.layouts)[u].name(),
                                              ": host gradient home without host buffers"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
  ASSIGN_OR_RETURN(Buffer norms, ctx.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                      units * sizeof(float), "grad norm parts"));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> zeroed, ctx.device->CreateEvent());
  ASSIGN_OR_RETURN(Buffer range_norms,
                   ctx.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                        2 * units * sizeof(float), "grad norm parts of ranges"));
  return std::unique_ptr<GradHome>(new HostGradHome(ctx, std::move(ready), std::move(join),
                                                    std::move(zeroed), std::move(norms),
                                                    std::move(range_norms)));
}

}  // namespace strata
