// The gradient reducers; see gradient_reducers.h.
//
// Ordering between the compute and comm streams uses two events held here: "compute done"
// (recorded on compute, waited on by comm) and "comm done" (the reverse). A gradient
// buffer is handed back to compute only after the comm stream finished with it.
#include "runtime/gradient_reducers.h"

#include <memory>
#include <utility>
#include <vector>

#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// The two cross-stream joins every component needs.
class Streams {
 public:
  static StatusOr<std::shared_ptr<Streams>> Create(const ZeroContext& ctx) {
    auto streams = std::shared_ptr<Streams>(new Streams(ctx));
    ASSIGN_OR_RETURN(streams->compute_done_, ctx.device->CreateEvent());
    ASSIGN_OR_RETURN(streams->comm_done_, ctx.device->CreateEvent());
    ASSIGN_OR_RETURN(streams->join_, ctx.device->CreateEvent());
    return streams;
  }
  // Later work on `waiter` waits for everything enqueued on `after` so far.
  Status Join(Stream& waiter, Stream& after) {
    return strata::Join(*ctx_.device, waiter, after, *join_);
  }
  // Later comm work waits for everything enqueued on compute so far.
  Status CommWaitsCompute() {
    RETURN_IF_ERROR(ctx_.device->Record(*compute_done_, *ctx_.compute));
    return ctx_.device->Wait(*ctx_.comm, *compute_done_);
  }
  // Later compute work waits for everything enqueued on comm so far.
  Status ComputeWaitsComm() {
    RETURN_IF_ERROR(ctx_.device->Record(*comm_done_, *ctx_.comm));
    return ctx_.device->Wait(*ctx_.compute, *comm_done_);
  }

 private:
  explicit Streams(const ZeroContext& ctx) : ctx_(ctx) {}
  ZeroContext ctx_;
  std::unique_ptr<Event> compute_done_;
  std::unique_ptr<Event> comm_done_;
  std::unique_ptr<Event> join_;
};

// Shared by all reducers: per-unit full gradient buffers handed to compute only after the
// comm stream finished with the previous micro-batch's contents.
class ReducerBase : public GradientReducer {
 public:
  ReducerBase(const ZeroContext& ctx, std::shared_ptr<Streams> streams, GradHome* home,
              bool sharded)
      : ctx_(ctx), streams_(std::move(streams)), home_(home), sharded_(sharded) {}

  Status Zero() override { return home_->Zero(); }
  bool SumsOffDevice() const override { return home_->tier() != StateTier::kDevice; }
  Status ReadSums(int unit, float* out) override { return home_->ReadSums(unit, out); }

  // Each rank norms the elements it owns: of its shard, or of the full sums (stage 0).
  Status SquaredNorm(int unit, float* out_device) override {
    const ShardRange range = OwnedRange((*ctx_.units)[unit], ctx_.communicator->rank());
    const size_t first = sharded_ ? 0 : range.begin;
    return home_->SquaredNorm(unit, first, range.end - range.begin, out_device);
  }

 protected:
  // The compute stream may touch comm-owned buffers again only after comm is done.
  Status HandBack() { return streams_->ComputeWaitsComm(); }

  ZeroContext ctx_;
  std::shared_ptr<Streams> streams_;
  GradHome* home_;
  bool sharded_;  // the sums hold the own shard only
};

// Stage 0: full gradients all-reduced (rank-order sum) into a full fp32 accumulator.
class AllReduceReducer : public ReducerBase {
 public:
  AllReduceReducer(const ZeroContext& ctx, std::shared_ptr<Streams> streams, GradHome* home)
      : ReducerBase(ctx, std::move(streams), home, /*sharded=*/false) {}
  StatusOr<void*> Grads(int unit) override {
    if (pending_) {
      RETURN_IF_ERROR(HandBack());
      pending_ = false;
    }
    return (*ctx_.units)[unit].grads.data();
  }
  Status UnitDone(int unit) override {
    UnitState& state = (*ctx_.units)[unit];
    RETURN_IF_ERROR(streams_->CommWaitsCompute());
    StreamLabel label(*ctx_.comm, "reduce " + (*ctx_.layouts)[unit].name(), "comm");
    RETURN_IF_ERROR(ctx_.communicator->AllReduce(state.grads.data(), state.padded_elements,
                                                 ctx_.dtype, *ctx_.comm));
    ASSIGN_OR_RETURN(Stream* reader, home_->Add(unit, state.grads.data(), *ctx_.comm));
    RETURN_IF_ERROR(streams_->Join(*ctx_.comm, *reader));
    RETURN_IF_ERROR(
        ctx_.device->MemsetAsync(state.grads.data(), 0, state.grads.bytes(), *ctx_.comm));
    pending_ = true;
    return absl::OkStatus();
  }
  Status BackwardDone() override {
    pending_ = false;
    return HandBack();
  }
  bool ReducesPerUnit() const override { return false; }

 private:
  bool pending_ = false;
};

// Stages 1-3: reduce-scatter to the owner, summed into the fp32 shard. Stage 1 keeps the
// full buffers and reduces all units after the backward; stages 2-3 reduce each unit as
// soon as its backward is done, overlapped with the next units, and free its full buffer.
class ReduceScatterReducer : public ReducerBase, public RangedReduction {
 public:
  ReduceScatterReducer(const ZeroContext& ctx, std::shared_ptr<Streams> streams, GradHome* home,
                       bool per_unit)
      : ReducerBase(ctx, std::move(streams), home, /*sharded=*/true), per_unit_(per_unit),
        live_(ctx.units->size()) {}

  bool ReducesPerUnit() const override { return per_unit_; }
  // The split needs the unit's whole gradient on this rank (one rank: nothing to reduce
  // over ranks) as soon as each part is final (per-unit reductions), and sums that add
  // ranges (the host home).
  RangedReduction* ranged() override {
    const bool can = per_unit_ && ctx_.communicator->world_size() == 1 &&
                     ctx_.replicas == nullptr && home_->ranged() != nullptr;
    return can ? this : nullptr;
  }

  StatusOr<void*> Grads(int unit) override {
    UnitState& state = (*ctx_.units)[unit];
    if (!per_unit_) {
      if (pending_) {
        RETURN_IF_ERROR(HandBack());
        pending_ = false;
      }
      return state.grads.data();
    }
    if (!live_[unit]) {
      // At most two earlier units' full buffers may still wait for their reduce-scatter.
      RETURN_IF_ERROR(lag_.Limit());
      frees_.Collect();
      const size_t bytes = state.padded_elements * DTypeBytes(ctx_.dtype);
      ASSIGN_OR_RETURN(Buffer full,
                       AllocateZeroedIn(ctx_, Tier::kDevice, StateKind::kGrads, bytes,
                                      (*ctx_.layouts)[unit].name() + " full grads"));
      live_[unit] = std::make_shared<Buffer>(std::move(full));
    }
    return live_[unit]->data();
  }

  Status UnitDone(int unit) override {
    if (!per_unit_) return absl::OkStatus();
    RETURN_IF_ERROR(streams_->CommWaitsCompute());
    ASSIGN_OR_RETURN(Stream* reader, ReduceInto(unit, live_[unit]->data()));
    RETURN_IF_ERROR(frees_.Add(*reader, std::move(live_[unit])));
    live_[unit].reset();
    return lag_.Mark(*reader);
  }

  Status LandEarly(int unit, const std::vector<ShardRange>& ranges) override {
    if (!live_[unit]) return absl::InternalError("an early landing without gradients");
    return home_->ranged()->AddRanges(unit, live_[unit]->data(), ranges, *ctx_.compute,
                                      /*last_part=*/false);
  }

  Status FinishRanges(int unit, const std::vector<ShardRange>& ranges) override {
    if (!live_[unit]) return absl::InternalError("a late landing without gradients");
    RETURN_IF_ERROR(home_->ranged()->AddRanges(unit, live_[unit]->data(), ranges,
                                               *ctx_.compute, /*last_part=*/true));
    RETURN_IF_ERROR(frees_.Add(*ctx_.copy, std::move(live_[unit])));
    live_[unit].reset();
    return lag_.Mark(*ctx_.copy);
  }

  Status WaitForLanding(int unit, Stream& stream) override {
    return ctx_.device->Wait(stream, home_->ready(unit));
  }

  Status SquaredNormRanges(int unit, const std::vector<ShardRange>& ranges,
                           float* out_device) override {
    return home_->ranged()->SquaredNormRanges(unit, ranges, out_device);
  }

  Status BackwardDone() override {
    if (per_unit_) return absl::OkStatus();
    RETURN_IF_ERROR(streams_->CommWaitsCompute());
    for (size_t u = 0; u < ctx_.units->size(); ++u) {
      if (!(*ctx_.layouts)[u].trainable()) continue;  // no gradients
      UnitState& state = (*ctx_.units)[u];
      ASSIGN_OR_RETURN(Stream* reader, ReduceInto(static_cast<int>(u), state.grads.data()));
      RETURN_IF_ERROR(streams_->Join(*ctx_.comm, *reader));
      RETURN_IF_ERROR(
          ctx_.device->MemsetAsync(state.grads.data(), 0, state.grads.bytes(), *ctx_.comm));
    }
    pending_ = true;
    return absl::OkStatus();
  }

 private:
  // Reduce-scatter on comm, then the own shard into the grad home; returns the stream
  // after which `full` is no longer read.
  StatusOr<Stream*> ReduceInto(int unit, void* full) {
    UnitState& state = (*ctx_.units)[unit];
    const int rank = ctx_.communicator->rank();
    void* own = ElementAt(full, rank * state.shard_elements, DTypeBytes(ctx_.dtype));
    StreamLabel label(*ctx_.comm, "reduce " + (*ctx_.layouts)[unit].name(), "comm");
    RETURN_IF_ERROR(ctx_.communicator->ReduceScatter(full, own, state.shard_elements, ctx_.dtype,
                                                     *ctx_.comm));
    if (ctx_.replicas != nullptr) {
      // Hybrid sharding: the node's sum of the shard, summed over the nodes (in node order;
      // the flat world sum adds the same values in another grouping: docs/placement.md).
      RETURN_IF_ERROR(
          ctx_.replicas->AllReduce(own, state.shard_elements, ctx_.dtype, *ctx_.comm));
    }
    return home_->Add(unit, own, *ctx_.comm);
  }

  const bool per_unit_;
  bool pending_ = false;
  std::vector<std::shared_ptr<Buffer>> live_;
  LagLimiter lag_{ctx_.device, 2};
  DeferredFrees frees_{ctx_.device};
};

}  // namespace

StatusOr<std::unique_ptr<GradientReducer>> CreateGradientReducer(const ZeroContext& context,
                                                                 GradHome* home, int stage) {
  if (home == nullptr) return absl::InvalidArgumentError("a reducer needs a grad home");
  ASSIGN_OR_RETURN(std::shared_ptr<Streams> streams, Streams::Create(context));
  if (stage == 0) {
    return std::unique_ptr<GradientReducer>(new AllReduceReducer(context, streams, home));
  }
  return std::unique_ptr<GradientReducer>(
      new ReduceScatterReducer(context, streams, home, /*per_unit=*/stage >= 2));
}

}  // namespace strata
