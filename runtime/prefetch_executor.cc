// The stage-3 prefetch executor; see prefetch_executor.h.
#include "runtime/prefetch_executor.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// Stage 3: param shards only between uses. The executor of the prefetch plan: before
// access k it issues the plan's gathers on the comm stream (each into a freshly allocated
// full buffer, after an event so it reads the optimizer's latest shard) and makes compute
// wait only for the unit it needs now; after access k it frees what the plan releases,
// ordered after the compute that used it. An access that does not match the plan is a
// counted deviation, served by an on-demand gather, never silently.
class PrefetchExecutor : public ParamGatherer {
 public:
  PrefetchExecutor(const ZeroContext& ctx, ParamHome* params, std::shared_ptr<FreshParams> fresh,
                   PrefetchPlan plan, std::unique_ptr<Event> copied)
      : ctx_(ctx), params_(params), fresh_(std::move(fresh)), plan_(std::move(plan)),
        copied_(std::move(copied)) {}

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
      TraceDeviation(access, unit, "access off the plan's trace");
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
      if (planned) {  // the plan should have fetched it
        ++stats_.deviations;
        TraceDeviation(access, unit, "not fetched ahead");
      }
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
  bool ReadBufferFree() const {
    return ahead_.size() < static_cast<size_t>(params_->read_buffers());
  }

  Status IssueDeferred() {
    while (!deferred_.empty() && ReadBufferFree()) {
      const int next = deferred_.front();
      deferred_.pop_front();
      RETURN_IF_ERROR(Fetch(next, /*must=*/true));
    }
    return absl::OkStatus();
  }

  // A deviation from the plan, as an instant on the trace's "prefetch" track.
  void TraceDeviation(int access, int unit, const char* why) {
    Trace* trace = ctx_.device->trace();
    if (trace == nullptr || !trace->recording()) return;
    trace->Instant(trace->Track("prefetch"), "deviation", Trace::Clock::now(),
                   {{"unit", (*ctx_.layouts)[unit].name()},
                    {"access", std::to_string(access)},
                    {"why", why}});
  }

  Status Fetch(int unit, bool must = true) {
    if (resident_.count(unit)) return absl::OkStatus();
    if (params_->read_buffers() > 0 && !must) {
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
    const void* shard = params_->part(unit);
    const std::string& name = (*ctx_.layouts)[unit].name();
    StreamLabel comm_label(*ctx_.comm, "gather " + name, "comm");
    StreamLabel copy_label(*ctx_.copy, "copy up " + name, "copy",
                           {{"bytes", std::to_string(state.shard_elements *
                                                     DTypeBytes(ctx_.dtype))}});
    if (params_->unit_tier(unit) == StateTier::kDevice) {
      // The shard is read in place, after the optimizer's last update of it.
      RETURN_IF_ERROR(fresh_->WaitOn(*ctx_.device, *ctx_.comm, unit));
      RETURN_IF_ERROR(ctx_.communicator->AllGather(shard, r.full->data(), state.shard_elements,
                                                   ctx_.dtype, *ctx_.comm));
    } else {
      // Host or nvme: the shard is copied up into its place in the full buffer (on nvme
      // read into a host buffer first), then gathered in place.
      void* own = ElementAt(r.full->data(), ctx_.communicator->rank() * state.shard_elements,
                            DTypeBytes(ctx_.dtype));
      if (params_->unit_tier(unit) == StateTier::kNvme) {
        ahead_.push_back(unit);
        fresh_->pending[unit] = nullptr;  // the tier orders the read after the write-back
      } else {
        RETURN_IF_ERROR(fresh_->WaitOn(*ctx_.device, *ctx_.copy, unit));
      }
      RETURN_IF_ERROR(params_->CopyUp(unit, own, *ctx_.copy));
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
  ParamHome* params_;
  std::shared_ptr<FreshParams> fresh_;
  PrefetchPlan plan_;
  std::unique_ptr<Event> copied_;  // host shard copied to the device (copy -> comm)
  std::deque<int> deferred_;  // planned fetches waiting for a read buffer, in plan order
  std::deque<int> ahead_;     // units read from nvme and not used yet
  std::map<int, Resident> resident_;
  DeferredFrees frees_{ctx_.device};
  GatherStats stats_;
  LagLimiter lag_{ctx_.device, 1};
};

}  // namespace

StatusOr<std::unique_ptr<ParamGatherer>> CreatePrefetchExecutor(
    const ZeroContext& context, ParamHome* params, std::shared_ptr<FreshParams> fresh) {
  if (params == nullptr || fresh == nullptr) {
    return absl::InvalidArgumentError("the prefetch executor needs a param home");
  }
  PrefetchPlanInput input;
  input.trace = context.trace;
  for (const UnitState& state : *context.units) {
    input.unit_bytes.push_back(state.padded_elements * DTypeBytes(context.dtype));
  }
  input.budget_bytes = context.prefetch_bytes;
  ASSIGN_OR_RETURN(PrefetchPlan plan, PlanPrefetch(input));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> copied, context.device->CreateEvent());
  return std::unique_ptr<ParamGatherer>(
      new PrefetchExecutor(context, params, std::move(fresh), std::move(plan), std::move(copied)));
}

}  // namespace strata
