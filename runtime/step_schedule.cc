// The exact and delayed step schedules and the tied split; see step_schedule.h.
#include "runtime/step_schedule.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/quant_format.h"
#include "tiers/unit_state.h"

namespace strata {
namespace {

// What every schedule does: a unit's gradients go to the reducer when its last backward
// use is enqueued; on the step's last micro-batch the unit's sum is then final
// (UnitFinal), and where the sums live off the device its norm part is taken right away,
// in the host stream's order, instead of in one pass after backward.
class ScheduleBase : public StepSchedule {
 public:
  explicit ScheduleBase(const ScheduleContext& ctx) : ctx_(ctx) {}

  Status BeforeBackward(int, int) override { return absl::OkStatus(); }

  // A frozen unit (a LoRA base) has no gradients to reduce and no optimizer step.
  bool Trainable(size_t unit) const { return ctx_.model->units()[unit].trainable(); }

  Status AfterBackward(int stage, int unit) override {
    if (stage != ctx_.last_backward_stage[unit]) return absl::OkStatus();
    GradientReducer& reducer = ctx_.components->reducer();
    RETURN_IF_ERROR(reducer.UnitDone(unit));
    if (!last_micro_batch_) return absl::OkStatus();
    if (reducer.ReducesPerUnit() && reducer.SumsOffDevice()) {
      RETURN_IF_ERROR(ctx_.norm->TakePart(reducer, unit));
    }
    return UnitFinal(unit);
  }

 protected:
  // The unit's last backward on the step's last micro-batch is enqueued.
  virtual Status UnitFinal(int unit) = 0;

  ScheduleContext ctx_;
  bool last_micro_batch_ = false;  // the running micro-batch completes the sums
};

// The split of a tied unit's sub-step (Placement::split_tied): on a step's only
// micro-batch, the elements of the unit that its last backward stage does not add to (all
// but the batch's token rows and the first T position rows of a tied embedding, per
// Model::LastStageRanges) are final after its first backward stage: they are landed,
// normed and stepped right then, while the rest of backward runs, and the late ranges
// after the last stage. Each element is added and stepped once, so the result is the
// unsplit step's, bit for bit.
class TiedSplit {
 public:
  TiedSplit(const ScheduleContext& ctx, RangedReduction* reduction, RangedSteps* steps)
      : ctx_(ctx), reduction_(reduction), steps_(steps), late_(ctx.units->size()),
        early_(ctx.units->size()) {}

  // Plans the split of every unit used by several backward stages for `batch`, or (null)
  // clears it: nothing is split.
  void Plan(const MicroBatch* batch) {
    for (size_t u = 0; u < late_.size(); ++u) {
      late_[u].clear();
      early_[u].clear();
      if (batch == nullptr || !ctx_.model->units()[u].trainable()) continue;
      if (ctx_.first_backward_stage[u] == ctx_.last_backward_stage[u]) continue;
      // The late ranges, and the rest of the unit (padding included), final earlier.
      std::vector<ShardRange> late;
      size_t at = 0;
      for (const auto& [begin, end] : ctx_.model->LastStageRanges(
               static_cast<int>(u), batch->inputs, ctx_.batch, ctx_.seq_len)) {
        late.push_back({begin, end});
        if (begin > at) early_[u].push_back({at, begin});
        at = end;
      }
      const size_t padded = (*ctx_.units)[u].padded_elements;
      if (at < padded) early_[u].push_back({at, padded});
      const std::vector<StateRun>& runs = (*ctx_.units)[u].state_runs;
      if (!runs.empty()) WholeBlocks(runs, padded, &late, &early_[u]);
      if (early_[u].empty()) continue;  // nothing final early: no split
      late_[u] = std::move(late);
    }
  }

  bool Splits(int unit) const { return !late_[unit].empty(); }

  // 8-bit states (train.optimizer_states = int8) step whole blocks of their quantized runs
  // (one absmax per block): each late range grows to the blocks it touches there, and the
  // early ranges are what is left. An element moved late is final early all the same (the
  // last stage does not add to it), so the step is still the unsplit one, bit for bit.
  static void WholeBlocks(const std::vector<StateRun>& runs, size_t padded,
                          std::vector<ShardRange>* late, std::vector<ShardRange>* early) {
    auto widen = [&](size_t at, bool up) {
      for (const StateRun& run : runs) {
        if (!run.quantized || at <= run.begin || at >= run.end) continue;
        const size_t down = run.begin + (at - run.begin) / kAdamStateBlock * kAdamStateBlock;
        return up ? std::min(run.end, down == at ? at : down + kAdamStateBlock) : down;
      }
      return at;
    };
    std::vector<ShardRange> grown;
    for (const ShardRange& range : *late) {
      const ShardRange wide{widen(range.begin, false), widen(range.end, true)};
      if (!grown.empty() && wide.begin <= grown.back().end) {
        grown.back().end = std::max(grown.back().end, wide.end);
      } else {
        grown.push_back(wide);
      }
    }
    early->clear();
    size_t at = 0;
    for (const ShardRange& range : grown) {
      if (range.begin > at) early->push_back({at, range.begin});
      at = range.end;
    }
    if (at < padded) early->push_back({at, padded});
    *late = std::move(grown);
  }

  // The early landing reads the buffer the last stage adds to.
  Status BeforeBackward(int stage, int unit) {
    if (stage != ctx_.last_backward_stage[unit]) return absl::OkStatus();
    return reduction_->WaitForLanding(unit, *ctx_.streams.compute);
  }

  // True once the unit's sub-step is complete (after its last stage).
  StatusOr<bool> AfterBackward(int stage, int unit, const AdamParams& params) {
    if (stage == ctx_.first_backward_stage[unit]) {
      RETURN_IF_ERROR(reduction_->LandEarly(unit, early_[unit]));
      RETURN_IF_ERROR(ctx_.norm->TakeRangesPart(*reduction_, unit, early_[unit], /*early=*/true));
      RETURN_IF_ERROR(steps_->StepRanges(unit, params, early_[unit]));
    }
    if (stage != ctx_.last_backward_stage[unit]) return false;
    RETURN_IF_ERROR(reduction_->FinishRanges(unit, late_[unit]));
    RETURN_IF_ERROR(ctx_.norm->TakeRangesPart(*reduction_, unit, late_[unit], /*early=*/false));
    RETURN_IF_ERROR(steps_->StepRanges(unit, params, late_[unit]));
    return true;
  }

 private:
  ScheduleContext ctx_;
  RangedReduction* reduction_;
  RangedSteps* steps_;
  // Per unit, for the running micro-batch: the ranges its last stage adds to (empty: not
  // split) and the rest.
  std::vector<std::vector<ShardRange>> late_;
  std::vector<std::vector<ShardRange>> early_;
};

// Every update in place before the next step.
class ExactSchedule : public ScheduleBase {
 public:
  ExactSchedule(const ScheduleContext& ctx, const Placement& placement,
                std::unique_ptr<TiedSplit> split)
      : ScheduleBase(ctx), early_allowed_(placement.early_step),
        hand_over_(placement.nvme_handover ? ctx.components->hand_over() : nullptr),
        split_(std::move(split)), stepped_(ctx.units->size(), false) {}

  Status BeginGradients(const AdamParams* params) override {
    RETURN_IF_ERROR(ctx_.components->reducer().Zero());
    RETURN_IF_ERROR(ctx_.norm->Begin());
    stepped_.assign(stepped_.size(), false);
    split_units_ = 0;
    params_.reset();
    if (early_allowed_ && params != nullptr) params_ = *params;
    return absl::OkStatus();
  }

  Status BeginMicroBatch(const MicroBatch& batch, int, bool last) override {
    last_micro_batch_ = last;
    // Early steps happen on the last micro-batch, where each unit's sum becomes final.
    early_ = last && params_.has_value();
    if (split_ != nullptr) split_->Plan(early_ ? &batch : nullptr);
    // Each unit is stepped right after its last Add: an NVMe grad home hands the sums
    // over in memory instead of writing them out for the optimizer to read back.
    if (hand_over_ != nullptr) RETURN_IF_ERROR(hand_over_->KeepFinalSums(early_));
    return absl::OkStatus();
  }

  Status AfterForward(int) override { return absl::OkStatus(); }

  Status BeforeBackward(int stage, int unit) override {
    if (Split(unit)) return split_->BeforeBackward(stage, unit);
    return absl::OkStatus();
  }

  Status AfterBackward(int stage, int unit) override {
    if (!Split(unit)) return ScheduleBase::AfterBackward(stage, unit);
    ASSIGN_OR_RETURN(const bool done, split_->AfterBackward(stage, unit, *params_));
    if (done) {
      stepped_[unit] = true;
      ++split_units_;
    }
    return absl::OkStatus();
  }

  Status EndMicroBatch() override {
    last_micro_batch_ = false;
    early_ = false;
    if (hand_over_ != nullptr) return hand_over_->KeepFinalSums(false);
    return absl::OkStatus();
  }

  StatusOr<double> FinishStep(AdamParams params) override {
    GradientReducer& reducer = ctx_.components->reducer();
    OptimizerStepper& stepper = ctx_.components->stepper();
    RETURN_IF_ERROR(ctx_.norm->Enqueue(reducer));
    ASSIGN_OR_RETURN(const double norm, ctx_.norm->Wait());
    const double scale = GradNorm::ClipScale(norm, ctx_.grad_clip);
    params.grad_scale = static_cast<float>(scale);
    // The remaining sub-steps in forward order, so the next forward's first units come
    // back first; their param copies (and stage 1-2 gathers) overlap with the next forward.
    for (size_t u = 0; u < stepped_.size(); ++u) {
      if (stepped_[u] || !Trainable(u)) continue;
      if (early_allowed_ && scale != 1.0) {
        return absl::InternalError("early optimizer steps with clipping");
      }
      RETURN_IF_ERROR(stepper.Step(static_cast<int>(u), params));
    }
    RETURN_IF_ERROR(stepper.WaitSteps());
    return norm;
  }

  Status Settle() override { return absl::OkStatus(); }
  int split_units() const override { return split_units_; }

 protected:
  Status UnitFinal(int unit) override {
    if (!early_ || !ctx_.components->reducer().ReducesPerUnit()) return absl::OkStatus();
    RETURN_IF_ERROR(ctx_.components->stepper().Step(unit, *params_));
    stepped_[unit] = true;
    return absl::OkStatus();
  }

 private:
  bool Split(int unit) const { return early_ && split_ != nullptr && split_->Splits(unit); }

  const bool early_allowed_;  // Placement::early_step
  SumHandOver* hand_over_;    // null: no hand-over
  std::unique_ptr<TiedSplit> split_;  // null: no split
  std::optional<AdamParams> params_;  // the step's, where early steps may run
  bool early_ = false;                // the running micro-batch steps units early
  std::vector<bool> stepped_;         // units whose sub-step was enqueued during backward
  int split_units_ = 0;
};

// ZeRO-Offload's one-step delayed update.
class DelayedSchedule : public ScheduleBase {
 public:
  DelayedSchedule(const ScheduleContext& ctx, StagedSteps* staged)
      : ScheduleBase(ctx), staged_steps_(staged), staged_(ctx.units->size(), false) {}

  // The sums start over in AfterForward, after the pending AdamW has read them.
  Status BeginGradients(const AdamParams* params) override {
    if (params != nullptr) applied_norm_ = 0.0;  // set if this step enqueues an update
    return ctx_.norm->Begin();
  }

  Status BeginMicroBatch(const MicroBatch&, int, bool last) override {
    last_micro_batch_ = last;
    return absl::OkStatus();
  }

  // The previous step's norm (reduced during this forward) sets the scale of its AdamW,
  // which now runs during this step; the sums start over after that AdamW has read them
  // (host-stream order).
  Status AfterForward(int index) override {
    if (index != 0) return absl::OkStatus();
    RETURN_IF_ERROR(StepPending());
    return ctx_.components->reducer().Zero();
  }

  Status EndMicroBatch() override {
    last_micro_batch_ = false;
    return absl::OkStatus();
  }

  // Nothing waits here: the norm is reduced in the background and read by the next step.
  StatusOr<double> FinishStep(AdamParams params) override {
    RETURN_IF_ERROR(ctx_.norm->Enqueue(ctx_.components->reducer()));
    pending_ = true;
    pending_params_ = params;
    return applied_norm_;
  }

  Status Settle() override {
    RETURN_IF_ERROR(StepPending());
    for (size_t u = 0; u < staged_.size(); ++u) {
      if (!staged_[u]) continue;
      staged_[u] = false;
      RETURN_IF_ERROR(staged_steps_->Publish(static_cast<int>(u), *ctx_.streams.compute));
    }
    return absl::OkStatus();
  }

 protected:
  // The old params' last use is enqueued: the staged new ones replace them.
  Status UnitFinal(int unit) override {
    if (!staged_[unit]) return absl::OkStatus();
    staged_[unit] = false;
    return staged_steps_->Publish(unit, *ctx_.streams.compute);
  }

 private:
  // The pending step's AdamW (its norm read, its scale set), staged for release after
  // each unit's next last use.
  Status StepPending() {
    if (!pending_) return absl::OkStatus();
    pending_ = false;
    ASSIGN_OR_RETURN(applied_norm_, ctx_.norm->Wait());
    pending_params_.grad_scale =
        static_cast<float>(GradNorm::ClipScale(applied_norm_, ctx_.grad_clip));
    for (size_t u = 0; u < staged_.size(); ++u) {
      if (!Trainable(u)) continue;
      RETURN_IF_ERROR(staged_steps_->StepStaged(static_cast<int>(u), pending_params_));
      staged_[u] = true;
    }
    return absl::OkStatus();
  }

  StagedSteps* staged_steps_;
  std::vector<bool> staged_;    // units whose update is staged, not yet published
  bool pending_ = false;        // a step whose norm is being reduced; AdamW not enqueued
  AdamParams pending_params_;   // its hyper-parameters
  double applied_norm_ = 0.0;   // norm of the update StepPending enqueued last
};

}  // namespace

StatusOr<std::unique_ptr<StepSchedule>> StepSchedule::Create(const Placement& placement,
                                                             const ScheduleContext& context) {
  if (context.components == nullptr || context.norm == nullptr || context.model == nullptr ||
      context.units == nullptr || context.streams.compute == nullptr) {
    return absl::InvalidArgumentError("a step schedule needs the components, a norm and a model");
  }
  if (placement.delayed()) {
    StagedSteps* staged = context.components->stepper().staged();
    if (staged == nullptr) {
      return absl::InvalidArgumentError(
          "zero.param_update=delayed needs the optimizer in the host tier "
          "(zero.optimizer_tier=host)");
    }
    return std::unique_ptr<StepSchedule>(new DelayedSchedule(context, staged));
  }
  std::unique_ptr<TiedSplit> split;
  if (placement.split_tied) {
    RangedReduction* reduction = context.components->reducer().ranged();
    RangedSteps* steps = context.components->stepper().ranged();
    if (reduction == nullptr || steps == nullptr) {
      return absl::InternalError("the placement allows the tied split but a component cannot");
    }
    split = std::make_unique<TiedSplit>(context, reduction, steps);
  }
  return std::unique_ptr<StepSchedule>(new ExactSchedule(context, placement, std::move(split)));
}

}  // namespace strata
