// ZeRO stage components and their factory; see zero_components.h.
//
// Ordering between the compute and comm streams uses two events held here: "compute done"
// (recorded on compute, waited on by comm) and "comm done" (the reverse). A gradient
// buffer is handed back to compute only after the comm stream finished with it; a param
// shard is gathered only after the optimizer that wrote it.
#include "runtime/zero_components.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "runtime/prefetch_planner.h"
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

char* Offset(void* base, size_t elements, DType dtype) {
  return static_cast<char*>(base) + elements * DTypeBytes(dtype);
}


StatusOr<Buffer> AllocateZeroed(const ZeroContext& ctx, StateKind kind, size_t bytes,
                                const std::string& what) {
  return AllocateZeroedIn(ctx, Tier::kDevice, kind, bytes, what);
}

// Per unit, the event after which freshly updated params are in place, set by the
// stepper and consumed (waited on once) by the gatherer's next use of the unit.
struct FreshParams {
  std::vector<Event*> pending;
  // Makes `stream` wait for the unit's update, if one is pending.
  Status WaitOn(Device& device, Stream& stream, int unit) {
    Event* event = pending[unit];
    if (event == nullptr) return absl::OkStatus();
    pending[unit] = nullptr;
    return device.Wait(stream, *event);
  }
};

// ---------------------------------------------------------------- gatherers

// Stages 0-2: every rank holds the full parameters.
class ReplicatedGatherer : public ParamGatherer {
 public:
  ReplicatedGatherer(const ZeroContext& ctx, std::shared_ptr<FreshParams> fresh)
      : ctx_(ctx), fresh_(std::move(fresh)) {}
  StatusOr<const void*> Acquire(int, int unit) override {
    RETURN_IF_ERROR(fresh_->WaitOn(*ctx_.device, *ctx_.compute, unit));
    return (*ctx_.units)[unit].params.data();
  }
  Status Release(int, int) override { return absl::OkStatus(); }
  Status EndMicroBatch() override { return absl::OkStatus(); }
  GatherStats stats() const override { return {}; }

 private:
  ZeroContext ctx_;
  std::shared_ptr<FreshParams> fresh_;
};

// Stage 3: param shards only between uses. The executor of the prefetch plan: before
// access k it issues the plan's gathers on the comm stream (each into a freshly allocated
// full buffer, after an event so it reads the optimizer's latest shard) and makes compute
// wait only for the unit it needs now; after access k it frees what the plan releases,
// ordered after the compute that used it. An access that does not match the plan is a
// counted deviation, served by an on-demand gather, never silently.
class ShardedGatherer : public ParamGatherer {
 public:
  ShardedGatherer(const ZeroContext& ctx, std::shared_ptr<FreshParams> fresh, PrefetchPlan plan,
                  std::unique_ptr<Event> copied)
      : ctx_(ctx), fresh_(std::move(fresh)), plan_(std::move(plan)), copied_(std::move(copied)) {}

  ~ShardedGatherer() override {
    // Reads ahead may still be landing in the read buffers (a failed step leaves them
    // posted; the streams are idle by now): they must be done before the buffers go.
    if (nvme_ != nullptr) nvme_->Drain().IgnoreError();
  }

  StatusOr<const void*> Acquire(int access, int unit) override {
    const bool planned = access >= 0 && access < static_cast<int>(ctx_.trace.size()) &&
                         ctx_.trace[access] == unit;
    // The host enqueues faster than compute runs: keep it at most one access ahead, so the
    // plan's budget bounds the gathered bytes that actually exist at once.
    RETURN_IF_ERROR(lag_.Limit());
    if (planned) {
      for (const PrefetchAction& action : plan_.before[access]) {
        if (action.kind == PrefetchActionKind::kFetch) {
          RETURN_IF_ERROR(Fetch(action.unit, /*must=*/false));
        }
      }
    } else {
      ++stats_.deviations;
    }
    RETURN_IF_ERROR(IssueDeferred());
    // A planned fetch still waiting for a read buffer is needed now: issue the waiting ones
    // up to it, in plan order, waiting for buffers.
    if (!resident_.count(unit) &&
        std::find(deferred_.begin(), deferred_.end(), unit) != deferred_.end()) {
      while (!resident_.count(unit)) {
        const int next = deferred_.front();
        deferred_.pop_front();
        RETURN_IF_ERROR(Fetch(next, /*must=*/true));
      }
    }
    auto it = resident_.find(unit);
    if (it == resident_.end()) {
      if (planned) ++stats_.deviations;  // the plan should have fetched it
      RETURN_IF_ERROR(Fetch(unit));
      it = resident_.find(unit);
      it->second.on_demand = true;
    }
    ahead_.erase(std::remove(ahead_.begin(), ahead_.end(), unit), ahead_.end());
    Resident& r = it->second;
    if (!r.ready_waited) {
      RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.compute, *r.ready));
      r.ready_waited = true;
    }
    return r.full->data();
  }

  Status Release(int access, int unit) override {
    const bool planned = access >= 0 && access < static_cast<int>(ctx_.trace.size()) &&
                         ctx_.trace[access] == unit;
    auto it = resident_.find(unit);
    if (it != resident_.end() && it->second.on_demand) return Drop(unit);
    if (planned) {
      for (const PrefetchAction& action : plan_.after[access]) {
        if (action.kind == PrefetchActionKind::kRelease) RETURN_IF_ERROR(Drop(action.unit));
      }
    }
    RETURN_IF_ERROR(IssueDeferred());
    return lag_.Mark(*ctx_.compute);
  }

  Status EndMicroBatch() override {
    deferred_.clear();
    ahead_.clear();
    while (!resident_.empty()) RETURN_IF_ERROR(Drop(resident_.begin()->first));
    return absl::OkStatus();
  }

  // Param shards live in `nvme`: each gather first reads the shard into one of
  // `read_buffers` host buffers (so host memory holds that many shards ahead, whatever
  // the model), then copies it up and gathers.
  Status ReadFromNvme(NvmeTier* nvme, std::vector<std::vector<NvmeChunk>> chunks,
                      int read_buffers) {
    nvme_ = nvme;
    chunks_ = std::move(chunks);
    // Chunk k of a shard lands at its element offset; every chunk but the last is a whole
    // number of 4 KiB pages, so the last one's padding ends the buffer.
    uint64_t bytes = 4096;
    for (const auto& unit_chunks : chunks_) {
      const NvmeChunk& last = unit_chunks.back();
      bytes = std::max(bytes, last.begin * DTypeBytes(ctx_.dtype) +
                                  nvme->PaddedBytes(last.id, ExtentKind::kParams));
    }
    reads_.resize(read_buffers);
    for (ReadBuffer& read : reads_) {
      ASSIGN_OR_RETURN(read.buffer, ctx_.device->Allocate(Tier::kHost, StateKind::kParams, bytes,
                                                          "param shard read-ahead"));
      ASSIGN_OR_RETURN(read.copied, ctx_.device->CreateEvent());
    }
    return absl::OkStatus();
  }

  GatherStats stats() const override { return stats_; }

 private:
  struct Resident {
    std::shared_ptr<Buffer> full;
    std::unique_ptr<Event> ready;
    bool ready_waited = false;
    bool on_demand = false;
  };

  // With params on nvme, a fetch the plan issues ahead (`must` false) waits in deferred_
  // while every read buffer holds a unit fetched but not yet used, instead of blocking the
  // host thread on a buffer (which would stop it from enqueueing the compute of units
  // already gathered). The rule depends on the trace only, so every rank issues its
  // gathers in the same order.
  bool ReadBufferFree() const { return ahead_.size() < reads_.size(); }

  Status IssueDeferred() {
    while (!deferred_.empty() && ReadBufferFree()) {
      const int next = deferred_.front();
      deferred_.pop_front();
      RETURN_IF_ERROR(Fetch(next, /*must=*/true));
    }
    return absl::OkStatus();
  }

  Status Fetch(int unit, bool must = true) {
    if (resident_.count(unit)) return absl::OkStatus();
    if (nvme_ != nullptr && !must) {
      if (!deferred_.empty() || !ReadBufferFree()) {
        if (std::find(deferred_.begin(), deferred_.end(), unit) == deferred_.end()) {
          deferred_.push_back(unit);
        }
        return absl::OkStatus();
      }
    }
    UnitState& state = (*ctx_.units)[unit];
    const size_t bytes = state.padded_elements * DTypeBytes(ctx_.dtype);
    Resident r;
    frees_.Collect();
    ASSIGN_OR_RETURN(Buffer full, ctx_.device->Allocate(
                                      Tier::kDevice, StateKind::kParams, bytes,
                                      (*ctx_.layouts)[unit].name() + " gathered params"));
    r.full = std::make_shared<Buffer>(std::move(full));
    ASSIGN_OR_RETURN(r.ready, ctx_.device->CreateEvent());
    if (nvme_ != nullptr) {
      // nvme -> host read-ahead buffer (I/O thread) -> own place in the full buffer (copy
      // stream, once the read is done) -> gathered in place.
      ReadBuffer& read = reads_[next_read_++ % reads_.size()];
      RETURN_IF_ERROR(read.copied->Synchronize());  // its previous shard has gone up
      ahead_.push_back(unit);
      std::vector<NvmeTier::Ticket> tickets;
      for (const NvmeChunk& chunk : chunks_[unit]) {
        tickets.push_back(nvme_->Read(
            chunk.id, {{ExtentKind::kParams, Offset(read.buffer.data(), chunk.begin, ctx_.dtype)}}));
      }
      NvmeTier* nvme = nvme_;
      ctx_.copy->EnqueueHost([nvme, tickets] {
        Status status;
        for (NvmeTier::Ticket ticket : tickets) status.Update(nvme->Wait(ticket));
        return status;
      });
      void* own = Offset(r.full->data(), ctx_.communicator->rank() * state.shard_elements,
                         ctx_.dtype);
      RETURN_IF_ERROR(ctx_.device->CopyAsync(own, read.buffer.data(),
                                             state.shard_elements * DTypeBytes(ctx_.dtype),
                                             *ctx_.copy));
      RETURN_IF_ERROR(ctx_.device->Record(*read.copied, *ctx_.copy));
      RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.comm, *ctx_.copy, *copied_));
      RETURN_IF_ERROR(ctx_.communicator->AllGather(own, r.full->data(), state.shard_elements,
                                                   ctx_.dtype, *ctx_.comm));
      fresh_->pending[unit] = nullptr;  // the read is ordered after the write-back
    } else if (state.params.tier() == Tier::kDevice) {
      // The shard is read after the optimizer's last update of it.
      RETURN_IF_ERROR(fresh_->WaitOn(*ctx_.device, *ctx_.comm, unit));
      RETURN_IF_ERROR(ctx_.communicator->AllGather(state.params.data(), r.full->data(),
                                                   state.shard_elements, ctx_.dtype, *ctx_.comm));
    } else {
      // Host-tier shard: copied into its place in the full buffer, then gathered in place.
      const size_t shard_bytes = state.shard_elements * DTypeBytes(ctx_.dtype);
      void* own = Offset(r.full->data(), ctx_.communicator->rank() * state.shard_elements,
                         ctx_.dtype);
      RETURN_IF_ERROR(fresh_->WaitOn(*ctx_.device, *ctx_.copy, unit));
      RETURN_IF_ERROR(ctx_.device->CopyAsync(own, state.params.data(), shard_bytes, *ctx_.copy));
      RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.comm, *ctx_.copy, *copied_));
      RETURN_IF_ERROR(ctx_.communicator->AllGather(own, r.full->data(), state.shard_elements,
                                                   ctx_.dtype, *ctx_.comm));
    }
    RETURN_IF_ERROR(ctx_.device->Record(*r.ready, *ctx_.comm));
    ++stats_.gathers;
    resident_.emplace(unit, std::move(r));
    return absl::OkStatus();
  }

  Status Drop(int unit) {
    deferred_.erase(std::remove(deferred_.begin(), deferred_.end(), unit), deferred_.end());
    ahead_.erase(std::remove(ahead_.begin(), ahead_.end(), unit), ahead_.end());
    auto it = resident_.find(unit);
    if (it == resident_.end()) return absl::OkStatus();
    // The comm stream must be done writing it, and compute done reading it.
    if (!it->second.ready_waited) {
      RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.compute, *it->second.ready));
    }
    RETURN_IF_ERROR(frees_.Add(*ctx_.compute, std::move(it->second.full)));
    resident_.erase(it);
    return absl::OkStatus();
  }

  ZeroContext ctx_;
  std::shared_ptr<FreshParams> fresh_;
  PrefetchPlan plan_;
  std::unique_ptr<Event> copied_;  // host shard copied to the device (copy -> comm)
  struct ReadBuffer {
    Buffer buffer;
    std::unique_ptr<Event> copied;  // its shard copied to the device
  };
  NvmeTier* nvme_ = nullptr;
  std::vector<std::vector<NvmeChunk>> chunks_;
  std::vector<ReadBuffer> reads_;
  size_t next_read_ = 0;
  std::deque<int> deferred_;  // planned fetches waiting for a read buffer, in plan order
  std::deque<int> ahead_;     // units read from nvme and not used yet
  std::map<int, Resident> resident_;
  DeferredFrees frees_{ctx_.device};
  GatherStats stats_;
  LagLimiter lag_{ctx_.device, 1};
};

// ---------------------------------------------------------------- reducers

// Shared by all reducers: per-unit full gradient buffers handed to compute only after the
// comm stream finished with the previous micro-batch's contents.
class ReducerBase : public GradientReducer {
 public:
  ReducerBase(const ZeroContext& ctx, std::shared_ptr<Streams> streams, GradHome* home)
      : ctx_(ctx), streams_(std::move(streams)), home_(home) {}

  Status Zero() override { return home_->Zero(); }

 protected:
  // The compute stream may touch comm-owned buffers again only after comm is done.
  Status HandBack() { return streams_->ComputeWaitsComm(); }

  ZeroContext ctx_;
  std::shared_ptr<Streams> streams_;
  GradHome* home_;
};

// Stage 0: full gradients all-reduced (rank-order sum) into a full fp32 accumulator.
class AllReduceReducer : public ReducerBase {
 public:
  using ReducerBase::ReducerBase;
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
  Status LandEarly(int, const std::vector<ShardRange>&) override {
    return NoSplit();
  }
  Status FinishRanges(int, const std::vector<ShardRange>&) override {
    return NoSplit();
  }

 private:
  static Status NoSplit() {
    return absl::InternalError("the split of a tied unit needs per-unit reductions");
  }
  bool pending_ = false;
};

// Stages 1-3: reduce-scatter to the owner, summed into the fp32 shard. Stage 1 keeps the
// full buffers and reduces all units after the backward; stages 2-3 reduce each unit as
// soon as its backward is done, overlapped with the next units, and free its full buffer.
class ReduceScatterReducer : public ReducerBase {
 public:
  ReduceScatterReducer(const ZeroContext& ctx, std::shared_ptr<Streams> streams, GradHome* home,
                       bool per_unit)
      : ReducerBase(ctx, std::move(streams), home), per_unit_(per_unit),
        live_(ctx.units->size()) {}

  bool ReducesPerUnit() const override { return per_unit_; }

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
                       AllocateZeroed(ctx_, StateKind::kGrads, bytes,
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
    if (!per_unit_ || ctx_.communicator->world_size() != 1 || !live_[unit]) {
      return absl::InternalError("the split of a tied unit needs one rank and stage 2-3");
    }
    return home_->AddRanges(unit, live_[unit]->data(), ranges, *ctx_.compute,
                            /*last_part=*/false);
  }

  Status FinishRanges(int unit, const std::vector<ShardRange>& ranges) override {
    if (!per_unit_ || ctx_.communicator->world_size() != 1 || !live_[unit]) {
      return absl::InternalError("the split of a tied unit needs one rank and stage 2-3");
    }
    RETURN_IF_ERROR(home_->AddRanges(unit, live_[unit]->data(), ranges, *ctx_.compute,
                                     /*last_part=*/true));
    RETURN_IF_ERROR(frees_.Add(*ctx_.copy, std::move(live_[unit])));
    live_[unit].reset();
    return lag_.Mark(*ctx_.copy);
  }

  Status BackwardDone() override {
    if (per_unit_) return absl::OkStatus();
    RETURN_IF_ERROR(streams_->CommWaitsCompute());
    for (size_t u = 0; u < ctx_.units->size(); ++u) {
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
    void* own = Offset(full, rank * state.shard_elements, ctx_.dtype);
    RETURN_IF_ERROR(ctx_.communicator->ReduceScatter(full, own, state.shard_elements, ctx_.dtype,
                                                     *ctx_.comm));
    return home_->Add(unit, own, *ctx_.comm);
  }

  const bool per_unit_;
  bool pending_ = false;
  std::vector<std::shared_ptr<Buffer>> live_;
  LagLimiter lag_{ctx_.device, 2};
  DeferredFrees frees_{ctx_.device};
};

// ---------------------------------------------------------------- steppers

// Stage 0: every rank steps the whole unit (identical on every rank).
class ReplicatedStepper : public OptimizerStepper {
 public:
  ReplicatedStepper(const ZeroContext& ctx, OptimizerHome* home,
                    std::shared_ptr<FreshParams> fresh)
      : ctx_(ctx), home_(home), fresh_(std::move(fresh)) {}
  Status Step(int unit, const AdamParams& params) override {
    UnitState& state = (*ctx_.units)[unit];
    RETURN_IF_ERROR(home_->Step(unit, params, {0, state.padded_elements}, 0, state.params.data(),
                                state.params.tier()));
    fresh_->pending[unit] = &home_->params_ready(unit);
    return absl::OkStatus();
  }
  Status StepStaged(int unit, const AdamParams& params) override {
    return home_->StepStaged(unit, params, {0, (*ctx_.units)[unit].padded_elements}, 0);
  }
  Status Publish(int unit, Stream& after) override {
    UnitState& state = (*ctx_.units)[unit];
    RETURN_IF_ERROR(
        home_->PublishStaged(unit, {0, state.padded_elements}, state.params.data(), after));
    fresh_->pending[unit] = &home_->params_ready(unit);
    return absl::OkStatus();
  }
  Status HoldGathers(bool) override { return absl::OkStatus(); }
  Status StepRanges(int, const AdamParams&, const std::vector<ShardRange>&) override {
    return absl::InternalError("stage 0 steps whole units");
  }
  Status WaitSteps() override { return home_->WaitSteps(); }
  double busy_ms() const override { return home_->busy_ms(); }

 private:
  ZeroContext ctx_;
  OptimizerHome* home_;
  std::shared_ptr<FreshParams> fresh_;
};

// Stages 1-3: each rank steps its shard. Stages 1-2 then all-gather the updated params
// into every rank's full buffer; stage 3 keeps them as the param shard.
class ShardedStepper : public OptimizerStepper {
 public:
  ShardedStepper(const ZeroContext& ctx, OptimizerHome* home, std::shared_ptr<FreshParams> fresh,
                 bool gather_after)
      : ctx_(ctx), home_(home), fresh_(std::move(fresh)), gather_after_(gather_after),
        gathered_(ctx.units->size()) {}

  static StatusOr<std::unique_ptr<ShardedStepper>> Create(const ZeroContext& ctx,
                                                          OptimizerHome* home,
                                                          std::shared_ptr<FreshParams> fresh,
                                                          bool gather_after) {
    auto stepper = std::make_unique<ShardedStepper>(ctx, home, std::move(fresh), gather_after);
    if (gather_after) {
      for (auto& event : stepper->gathered_) {
        ASSIGN_OR_RETURN(event, ctx.device->CreateEvent());
      }
    }
    return stepper;
  }

  Status Step(int unit, const AdamParams& params) override {
    UnitState& state = (*ctx_.units)[unit];
    const ShardRange range = OwnedRange(state, ctx_.communicator->rank());
    void* dest = Destination(state, range);
    RETURN_IF_ERROR(
        home_->Step(unit, params, range, range.begin, dest, state.params.tier()));
    return Refresh(unit);
  }
  Status StepStaged(int unit, const AdamParams& params) override {
    const ShardRange range = OwnedRange((*ctx_.units)[unit], ctx_.communicator->rank());
    return home_->StepStaged(unit, params, range, range.begin);
  }
  Status Publish(int unit, Stream& after) override {
    UnitState& state = (*ctx_.units)[unit];
    const ShardRange range = OwnedRange(state, ctx_.communicator->rank());
    void* dest = Destination(state, range);
    RETURN_IF_ERROR(home_->PublishStaged(unit, range, dest, after));
    return Refresh(unit);
  }
  Status StepRanges(int unit, const AdamParams& params,
                    const std::vector<ShardRange>& ranges) override {
    if (gather_after_) return absl::InternalError("sub-range steps need one rank");
    UnitState& state = (*ctx_.units)[unit];
    const ShardRange owned = OwnedRange(state, ctx_.communicator->rank());
    RETURN_IF_ERROR(
        home_->StepRanges(unit, params, ranges, owned.begin, Destination(state, owned)));
    return Refresh(unit);
  }
  Status HoldGathers(bool hold) override {
    hold_ = hold;
    if (hold) return absl::OkStatus();
    std::sort(held_.begin(), held_.end());
    for (int unit : held_) RETURN_IF_ERROR(Gather(unit));
    held_.clear();
    return absl::OkStatus();
  }
  Status WaitSteps() override { return home_->WaitSteps(); }
  double busy_ms() const override { return home_->busy_ms(); }

 private:
  // Where the owned shard's updated params go: into the full buffer (stages 1-2, gathered
  // after) or the param shard (stage 3).
  void* Destination(UnitState& state, ShardRange range) const {
    return gather_after_ ? Offset(state.params.data(), range.begin, ctx_.dtype)
                         : state.params.data();
  }
  // Makes the unit's next use wait for its updated params (stages 1-2: gathered first,
  // or once the gathers are released).
  Status Refresh(int unit) {
    if (!gather_after_) {
      fresh_->pending[unit] = &home_->params_ready(unit);
      return absl::OkStatus();
    }
    fresh_->pending[unit] = gathered_[unit].get();
    if (hold_) {
      held_.push_back(unit);
      return absl::OkStatus();
    }
    return Gather(unit);
  }
  // The updated shard from every rank into every rank's full params.
  Status Gather(int unit) {
    UnitState& state = (*ctx_.units)[unit];
    void* dest = Destination(state, OwnedRange(state, ctx_.communicator->rank()));
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.comm, home_->params_ready(unit)));
    RETURN_IF_ERROR(ctx_.communicator->AllGather(dest, state.params.data(), state.shard_elements,
                                                 ctx_.dtype, *ctx_.comm));
    // The next use of the unit on compute waits for the gathered params.
    return ctx_.device->Record(*gathered_[unit], *ctx_.comm);
  }

  ZeroContext ctx_;
  OptimizerHome* home_;
  std::shared_ptr<FreshParams> fresh_;
  bool gather_after_;
  std::vector<std::unique_ptr<Event>> gathered_;
  bool hold_ = false;
  std::vector<int> held_;  // units whose gather is held back
};

// ---------------------------------------------------------------- state and factory

struct StageLayout {
  bool full_params;      // params buffer holds the full unit
  bool persistent_grads; // full grad buffer lives for the whole run
  bool sharded_state;    // grad_accum, master, m, v hold the own shard only
};

// The memory tiers of a Placement: nvme state is worked on through host buffers.
struct MemoryPlacement {
  explicit MemoryPlacement(const Placement& placement)
      : optimizer(MemoryTier(placement.optimizer)), grads(MemoryTier(placement.grads)),
        params(MemoryTier(placement.params)),
        optimizer_on_nvme(placement.optimizer == StateTier::kNvme),
        params_on_nvme(placement.params == StateTier::kNvme),
        grads_on_nvme(placement.grads == StateTier::kNvme) {}
  static Tier MemoryTier(StateTier tier) {
    return tier == StateTier::kDevice ? Tier::kDevice : Tier::kHost;
  }
  Tier optimizer;
  Tier grads;
  Tier params;  // stage 3's param shards
  bool optimizer_on_nvme;  // optimizer state in the NVMe tier (optimizer = kHost)
  bool params_on_nvme;     // stage 3 param shards in the NVMe tier (no buffer)
  bool grads_on_nvme;      // fp32 gradient sums in the NVMe tier (no grad_accum)
};

// The rank's NVMe tiers: per chunk of each unit's shard, the optimizer state extents (fp32;
// with `grads`, the gradient sums too), or (`params`) the param shard (compute dtype).
StatusOr<std::unique_ptr<NvmeTier>> CreateNvmeTier(
    const Options& options, const ZeroContext& ctx, bool params, bool grads,
    const std::vector<std::vector<NvmeChunk>>& chunks) {
  NvmeStoreOptions store;
  store.dir = options.zero.nvme_dir;
  store.rank = ctx.communicator->rank();
  store.engine.engine = options.nvme.engine;
  store.engine.queue_depth = options.nvme.queue_depth;
  std::vector<ExtentSpec> extents;
  for (size_t u = 0; u < ctx.layouts->size(); ++u) {
    const UnitLayout& unit = (*ctx.layouts)[u];
    for (size_t k = 0; k < chunks[u].size(); ++k) {
      const NvmeChunk& chunk = chunks[u][k];
      const std::string name = absl::StrCat(unit.name(), " chunk ", k);
      const uint64_t n = chunk.end - chunk.begin;
      if (params) {
        extents.push_back({chunk.id, name, ExtentKind::kParams, n * DTypeBytes(ctx.dtype)});
      } else {
        for (ExtentKind kind :
             {ExtentKind::kMaster, ExtentKind::kExpAvg, ExtentKind::kExpAvgSq}) {
          extents.push_back({chunk.id, name, kind, n * 4});
        }
        if (grads) extents.push_back({chunk.id, name, ExtentKind::kGrads, n * 4});
      }
    }
  }
  return NvmeTier::Create(store, extents);
}

Status AllocateState(const ZeroContext& ctx, const StageLayout& layout,
                     const MemoryPlacement& placement) {
  const HomeContext& home = ctx;
  const size_t element_bytes = DTypeBytes(ctx.dtype);
  const int world = ctx.communicator->world_size();
  for (size_t u = 0; u < ctx.layouts->size(); ++u) {
    const UnitLayout& unit = (*ctx.layouts)[u];
    UnitState& state = (*ctx.units)[u];
    state.padded_elements = unit.PaddedElements(world);
    state.shard_elements = unit.ShardElements(world);
    const size_t n_params = layout.full_params ? state.padded_elements : state.shard_elements;
    const size_t n_state = layout.sharded_state ? state.shard_elements : state.padded_elements;
    const std::string& name = unit.name();
    const Tier param_tier = layout.full_params ? Tier::kDevice : placement.params;
    if (layout.full_params || !placement.params_on_nvme) {
      ASSIGN_OR_RETURN(state.params, AllocateZeroedIn(home, param_tier, StateKind::kParams,
                                                      n_params * element_bytes,
                                                      name + " params"));
    }
    if (layout.persistent_grads) {
      ASSIGN_OR_RETURN(state.grads,
                       AllocateZeroed(ctx, StateKind::kGrads,
                                      state.padded_elements * element_bytes, name + " grads"));
    }
    if (!placement.grads_on_nvme) {
      ASSIGN_OR_RETURN(state.grad_accum,
                       AllocateZeroedIn(home, placement.grads, StateKind::kGrads, n_state * 4,
                                        name + " fp32 grad accumulator"));
    }
    if (!placement.optimizer_on_nvme) {
      ASSIGN_OR_RETURN(state.master, AllocateZeroedIn(home, placement.optimizer,
                                                      StateKind::kOptimizer, n_state * 4,
                                                      name + " fp32 master"));
      ASSIGN_OR_RETURN(state.exp_avg, AllocateZeroedIn(home, placement.optimizer,
                                                       StateKind::kOptimizer, n_state * 4,
                                                       name + " exp_avg"));
      ASSIGN_OR_RETURN(state.exp_avg_sq, AllocateZeroedIn(home, placement.optimizer,
                                                          StateKind::kOptimizer, n_state * 4,
                                                          name + " exp_avg_sq"));
    }
    // Host staging of the offloaded optimizer.
    if (placement.grads == Tier::kHost && !placement.grads_on_nvme) {
      ASSIGN_OR_RETURN(state.grad_landing,
                       AllocateZeroedIn(home, Tier::kHost, StateKind::kGrads,
                                        n_state * element_bytes, name + " grad landing"));
    }
    if (placement.optimizer == Tier::kHost && !placement.optimizer_on_nvme) {
      if (placement.grads == Tier::kDevice) {
        ASSIGN_OR_RETURN(state.grad_staging,
                         AllocateZeroedIn(home, Tier::kHost, StateKind::kGrads, n_state * 4,
                                          name + " fp32 grad staging"));
      }
      if (param_tier == Tier::kDevice) {
        ASSIGN_OR_RETURN(state.param_staging,
                         AllocateZeroedIn(home, Tier::kHost, StateKind::kParams,
                                          n_state * element_bytes, name + " param staging"));
      }
    }
  }
  return ctx.compute->Synchronize();
}

}  // namespace

StatusOr<ZeroComponents> MakeZeroComponents(const Options& options, const Placement& resolved,
                                            const ZeroContext& context) {
  const int stage = resolved.stage;
  if (context.communicator == nullptr || context.comm == nullptr || context.copy == nullptr ||
      context.host == nullptr || context.host_ops == nullptr) {
    return absl::InvalidArgumentError(
        "the ZeRO components need a communicator, comm/copy/host streams and host kernels");
  }
  const MemoryPlacement placement(resolved);
  const StageLayout layouts[4] = {
      {true, true, false},   // 0: everything replicated
      {true, true, true},    // 1: optimizer state sharded
      {true, false, true},   // 2: + gradients reduce-scattered per unit, full grads freed
      {false, false, true},  // 3: + params sharded between uses
  };
  context.units->clear();
  context.units->resize(context.layouts->size());
  RETURN_IF_ERROR(AllocateState(context, layouts[stage], placement));
  ASSIGN_OR_RETURN(std::shared_ptr<Streams> streams, Streams::Create(context));
  auto fresh = std::make_shared<FreshParams>();
  fresh->pending.assign(context.units->size(), nullptr);

  ZeroComponents components;
  const HomeContext& home = context;
  if (placement.optimizer_on_nvme) {
    std::vector<size_t> shards;
    for (const UnitState& state : *context.units) shards.push_back(state.shard_elements);
    components.nvme_chunks = NvmeChunks(shards, options.nvme.chunk_bytes / 4);
    ASSIGN_OR_RETURN(components.nvme,
                     CreateNvmeTier(options, context, /*params=*/false,
                                    placement.grads_on_nvme, components.nvme_chunks));
    if (placement.params_on_nvme) {
      ASSIGN_OR_RETURN(components.param_nvme,
                       CreateNvmeTier(options, context, /*params=*/true, /*grads=*/false,
                                    components.nvme_chunks));
    }
  }
  if (placement.grads_on_nvme) {
    ASSIGN_OR_RETURN(components.grad_home,
                     GradHome::CreateNvme(home, components.nvme.get(), components.nvme_chunks,
                                          options.nvme.grad_buffers));
  } else {
    ASSIGN_OR_RETURN(components.grad_home, GradHome::Create(home, placement.grads));
  }
  if (placement.optimizer_on_nvme) {
    ASSIGN_OR_RETURN(components.optimizer_home,
                     OptimizerHome::CreateNvme(home, components.grad_home.get(),
                                               components.nvme.get(), components.nvme_chunks,
                                               components.param_nvme.get(),
                                               options.nvme.optimizer_buffers));
  } else {
    ASSIGN_OR_RETURN(components.optimizer_home,
                     OptimizerHome::Create(home, placement.optimizer, components.grad_home.get()));
  }
  components.params_on_nvme = placement.params_on_nvme;
  components.sharded_optimizer = layouts[stage].sharded_state;
  if (stage == 3) {
    PrefetchPlanInput input;
    input.trace = context.trace;
    for (const UnitState& state : *context.units) {
      input.unit_bytes.push_back(state.padded_elements * DTypeBytes(context.dtype));
    }
    input.budget_bytes = context.prefetch_bytes;
    ASSIGN_OR_RETURN(PrefetchPlan plan, PlanPrefetch(input));
    ASSIGN_OR_RETURN(std::unique_ptr<Event> copied, context.device->CreateEvent());
    auto gatherer = std::make_unique<ShardedGatherer>(context, fresh, std::move(plan),
                                                      std::move(copied));
    if (placement.params_on_nvme) {
      RETURN_IF_ERROR(gatherer->ReadFromNvme(components.param_nvme.get(), components.nvme_chunks,
                                             options.nvme.read_ahead_units));
    }
    components.gatherer = std::move(gatherer);
  } else {
    components.gatherer = std::make_unique<ReplicatedGatherer>(context, fresh);
  }
  GradHome* grad_home = components.grad_home.get();
  OptimizerHome* optimizer_home = components.optimizer_home.get();
  if (stage == 0) {
    components.reducer = std::make_unique<AllReduceReducer>(context, streams, grad_home);
    components.stepper = std::make_unique<ReplicatedStepper>(context, optimizer_home, fresh);
  } else {
    components.reducer = std::make_unique<ReduceScatterReducer>(context, streams, grad_home,
                                                                /*per_unit=*/stage >= 2);
    // Stages 1-2 all-gather the updated shards; with one rank the shard is the unit, updated
    // in place (no collective whose wait would hold the comm stream's next reductions).
    const bool gather_after = stage <= 2 && context.communicator->world_size() > 1;
    ASSIGN_OR_RETURN(components.stepper,
                     ShardedStepper::Create(context, optimizer_home, fresh, gather_after));
  }
  return components;
}

}  // namespace strata
