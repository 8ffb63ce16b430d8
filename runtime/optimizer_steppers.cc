// The optimizer steppers; see optimizer_steppers.h.
#include "runtime/optimizer_steppers.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace strata {
namespace {

// Stage 0: every rank steps the whole unit (identical on every rank).
class ReplicatedStepper : public OptimizerStepper, public StagedSteps {
 public:
  ReplicatedStepper(const ZeroContext& ctx, OptimizerHome* home, ParamHome* params,
                    std::shared_ptr<FreshParams> fresh)
      : ctx_(ctx), home_(home), params_(params), fresh_(std::move(fresh)) {}

  Status Step(int unit, const AdamParams& params) override {
    RETURN_IF_ERROR(home_->Step(unit, params, Whole(unit), 0, params_->part(unit)));
    fresh_->pending[unit] = &home_->params_ready(unit);
    return absl::OkStatus();
  }
  Status HoldGathers(bool) override { return absl::OkStatus(); }
  Status WaitSteps() override { return home_->WaitSteps(); }
  double busy_ms() const override { return home_->busy_ms(); }
  StagedSteps* staged() override { return home_->staged() != nullptr ? this : nullptr; }

  Status StepStaged(int unit, const AdamParams& params) override {
    return home_->staged()->StepStaged(unit, params, Whole(unit), 0);
  }
  Status Publish(int unit, Stream& after) override {
    RETURN_IF_ERROR(home_->staged()->PublishStaged(unit, Whole(unit), params_->part(unit), after));
    fresh_->pending[unit] = &home_->params_ready(unit);
    return absl::OkStatus();
  }

 private:
  ShardRange Whole(int unit) const { return {0, (*ctx_.units)[unit].padded_elements}; }

  ZeroContext ctx_;
  OptimizerHome* home_;
  ParamHome* params_;
  std::shared_ptr<FreshParams> fresh_;
};

// Stages 1-3: each rank steps its shard. Stages 1-2 then all-gather the updated params
// into every rank's full buffer; stage 3 keeps them as the param shard.
class ShardedStepper : public OptimizerStepper, public StagedSteps, public RangedSteps {
 public:
  ShardedStepper(const ZeroContext& ctx, OptimizerHome* home, ParamHome* params,
                 std::shared_ptr<FreshParams> fresh, bool gather_after,
                 std::vector<std::unique_ptr<Event>> gathered)
      : ctx_(ctx), home_(home), params_(params), fresh_(std::move(fresh)),
        gather_after_(gather_after), gathered_(std::move(gathered)) {}

  Status Step(int unit, const AdamParams& params) override {
    const ShardRange range = Owned(unit);
    RETURN_IF_ERROR(home_->Step(unit, params, range, range.begin, Destination(unit)));
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
  StagedSteps* staged() override { return home_->staged() != nullptr ? this : nullptr; }
  // Sub-ranges are stepped where no gather follows (one rank: the shard is the unit).
  RangedSteps* ranged() override {
    return home_->staged() != nullptr && !gather_after_ ? this : nullptr;
  }

  Status StepStaged(int unit, const AdamParams& params) override {
    const ShardRange range = Owned(unit);
    return home_->staged()->StepStaged(unit, params, range, range.begin);
  }
  Status Publish(int unit, Stream& after) override {
    RETURN_IF_ERROR(
        home_->staged()->PublishStaged(unit, Owned(unit), Destination(unit), after));
    return Refresh(unit);
  }
  Status StepRanges(int unit, const AdamParams& params,
                    const std::vector<ShardRange>& ranges) override {
    RETURN_IF_ERROR(home_->staged()->StepRanges(unit, params, ranges, Owned(unit).begin,
                                                Destination(unit)));
    return Refresh(unit);
  }

 private:
  ShardRange Owned(int unit) const {
    return OwnedRange((*ctx_.units)[unit], ctx_.communicator->rank());
  }
  // Where the owned shard's updated params go: into the full buffer (stages 1-2, gathered
  // after) or the param shard (stage 3; null where the shards are on nvme: the optimizer
  // home writes them back).
  void* Destination(int unit) const {
    void* part = params_->part(unit);
    if (!gather_after_ || part == nullptr) return part;
    return ElementAt(part, Owned(unit).begin, DTypeBytes(ctx_.dtype));
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
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.comm, home_->params_ready(unit)));
    RETURN_IF_ERROR(ctx_.communicator->AllGather(Destination(unit), params_->part(unit),
                                                 (*ctx_.units)[unit].shard_elements,
                                                 ctx_.dtype, *ctx_.comm));
    // The next use of the unit on compute waits for the gathered params.
    return ctx_.device->Record(*gathered_[unit], *ctx_.comm);
  }

  ZeroContext ctx_;
  OptimizerHome* home_;
  ParamHome* params_;
  std::shared_ptr<FreshParams> fresh_;
  bool gather_after_;
  std::vector<std::unique_ptr<Event>> gathered_;  // gather_after_ only
  bool hold_ = false;
  std::vector<int> held_;  // units whose gather is held back
};

}  // namespace

StatusOr<std::unique_ptr<OptimizerStepper>> CreateOptimizerStepper(
    const ZeroContext& context, OptimizerHome* home, ParamHome* params,
    std::shared_ptr<FreshParams> fresh, int stage) {
  if (home == nullptr || params == nullptr || fresh == nullptr) {
    return absl::InvalidArgumentError("a stepper needs an optimizer home and a param home");
  }
  if (stage == 0) {
    return std::unique_ptr<OptimizerStepper>(
        new ReplicatedStepper(context, home, params, std::move(fresh)));
  }
  // Stages 1-2 all-gather the updated shards; with one rank the shard is the unit, updated
  // in place (no collective whose wait would hold the comm stream's next reductions).
  const bool gather_after = stage <= 2 && context.communicator->world_size() > 1;
  std::vector<std::unique_ptr<Event>> gathered;
  if (gather_after) {
    for (size_t u = 0; u < context.units->size(); ++u) {
      ASSIGN_OR_RETURN(std::unique_ptr<Event> event, context.device->CreateEvent());
      gathered.push_back(std::move(event));
    }
  }
  return std::unique_ptr<OptimizerStepper>(new ShardedStepper(
      context, home, params, std::move(fresh), gather_after, std::move(gathered)));
}

}  // namespace strata
