// Engine: micro-batch loop, unit-by-unit forward/backward through the ZeRO components,
// global-norm clipping and the optimizer sub-steps. See engine.h.
//
// Global batch and loss: every rank runs `train.micro_batch` rows of each micro-batch and
// scales its loss gradient by 1 / (B * T * grad_accum * world), so the rank-order sum the
// reducers form is the gradient of the mean loss over the global batch. The gradient norm
// is summed from per-(unit, shard) partial sums in one fixed order on every rank, so it is
// the same number whatever the stage.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "tiers/stream_helpers.h"

namespace strata {
namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Engine::Engine(const Options& options, Device* device, Ops* ops, Ops* host_ops, Model* model,
               Communicator* communicator)
    : options_(options), device_(device), ops_(ops), host_ops_(host_ops), model_(model),
      communicator_(communicator) {}

Engine::~Engine() {
  // Work in flight may still reference buffers owned here.
  for (Stream* stream : {host_.get(), copy_.get(), comm_.get(), compute_.get()}) {
    if (stream) stream->Synchronize().IgnoreError();
  }
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Options& options, Device* device,
                                                 Ops* ops, Ops* host_ops, Model* model,
                                                 Communicator* communicator) {
  if (ops == nullptr || host_ops == nullptr) return absl::InvalidArgumentError("no kernels");
  if (ops->dtype() != options.train.dtype || host_ops->dtype() != options.train.dtype) {
    return absl::InvalidArgumentError("the kernels' dtype differs from train.dtype");
  }
  if (communicator == nullptr) return absl::InvalidArgumentError("no communicator");
  std::unique_ptr<Engine> engine(
      new Engine(options, device, ops, host_ops, model, communicator));
  RETURN_IF_ERROR(engine->Init());
  return engine;
}

Status Engine::PublishStaged() {
  RETURN_IF_ERROR(StepPending());
  for (size_t u = 0; u < staged_.size(); ++u) {
    if (!staged_[u]) continue;
    staged_[u] = false;
    RETURN_IF_ERROR(components_.stepper->Publish(static_cast<int>(u), *compute_));
  }
  return absl::OkStatus();
}

Engine::NvmeCounts Engine::NvmeCountsNow() const {
  NvmeCounts counts;
  for (NvmeTier* tier : {components_.nvme.get(), components_.param_nvme.get()}) {
    if (tier == nullptr) continue;
    counts.read += tier->bytes_read();
    counts.written += tier->bytes_written();
  }
  if (components_.nvme) counts.busy_ms = components_.nvme->busy_ms();
  if (components_.param_nvme) counts.param_busy_ms = components_.param_nvme->busy_ms();
  return counts;
}

Status Engine::SyncStreams() {
  // Staged params released, every stream, each to its end, then the state's write-backs;
  // the first error wins.
  Status status = PublishStaged();
  for (Stream* stream : {host_.get(), copy_.get(), comm_.get(), compute_.get()}) {
    status.Update(stream->Synchronize());
  }
  if (components_.optimizer_home) status.Update(components_.optimizer_home->Flush());
  return status;
}

Status Engine::Init() {
  ASSIGN_OR_RETURN(compute_, device_->CreateStream("compute"));
  ASSIGN_OR_RETURN(comm_, device_->CreateStream("comm"));
  ASSIGN_OR_RETURN(copy_, device_->CreateStream("copy"));
  ASSIGN_OR_RETURN(host_, device_->CreateStream("cpu-optimizer"));
  const auto& layouts = model_->units();
  const auto& stages = model_->stages();
  const int num_units = static_cast<int>(layouts.size());
  ASSIGN_OR_RETURN(placement_, ResolvePlacement(options_, communicator_->world_size()));
  delayed_ = placement_.delayed();
  staged_.assign(num_units, false);
  ASSIGN_OR_RETURN(norms_ready_, device_->CreateEvent());
  ASSIGN_OR_RETURN(norms_join_, device_->CreateEvent());

  // The access trace, and for each unit the stage whose backward completes its gradient.
  last_backward_stage_.assign(num_units, -1);
  for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
    for (int u : stages[s].units) trace_.push_back({s, u, false});
  }
  first_backward_stage_.assign(num_units, -1);
  for (int s = static_cast<int>(stages.size()) - 1; s >= 0; --s) {
    for (int u : stages[s].units) {
      trace_.push_back({s, u, true});
      last_backward_stage_[u] = s;
      if (first_backward_stage_[u] < 0) first_backward_stage_[u] = s;
    }
  }
  for (int u = 0; u < num_units; ++u) {
    if (last_backward_stage_[u] < 0) {
      return absl::InternalError(absl::StrCat("unit '", layouts[u].name(), "' is used by no stage"));
    }
  }

  ZeroContext zero;
  zero.device = device_;
  zero.ops = ops_;
  zero.host_ops = host_ops_;
  zero.compute = compute_.get();
  zero.comm = comm_.get();
  zero.copy = copy_.get();
  zero.host = host_.get();
  zero.communicator = communicator_;
  zero.layouts = &layouts;
  zero.units = &units_;
  zero.dtype = options_.train.dtype;
  zero.prefetch_bytes = options_.zero.prefetch_bytes;
  for (const UnitAccess& access : trace_) zero.trace.push_back(access.unit);
  ASSIGN_OR_RETURN(components_, MakeZeroComponents(options_, placement_, zero));
  // A tied unit's sub-step may be split where the pieces are exactly the whole step's
  // (Placement::split_tied).
  split_allowed_ = placement_.split_tied;
  late_ranges_.assign(num_units, {});
  early_ranges_.assign(num_units, {});

  // Initial values: fp32 master from the model (the same on every rank), cast to the
  // compute dtype; each rank keeps what it owns.
  for (int u = 0; u < num_units; ++u) {
    std::vector<float> values(units_[u].padded_elements, 0.0f);
    model_->InitUnit(u, options_.train.seed, values.data());
    RETURN_IF_ERROR(WriteMaster(u, values));
  }

  const int B = options_.train.micro_batch, T = options_.train.seq_len;
  const int world = communicator_->world_size();
  tokens_per_micro_batch_ = B * T;
  RETURN_IF_ERROR(model_->PrepareActivations(*device_, B, T));
  ASSIGN_OR_RETURN(tokens_device_, device_->Allocate(Tier::kDevice, StateKind::kActivations,
                                                     2 * B * T * sizeof(int32_t), "token ids"));
  ASSIGN_OR_RETURN(losses_host_,
                   device_->Allocate(Tier::kHost, StateKind::kWorkspace,
                                     options_.train.grad_accum * B * T * sizeof(float), "losses"));
  // Per rank: each unit's norm part, then the early part of a split unit (0 otherwise).
  const size_t norm_bytes = static_cast<size_t>(world) * 2 * num_units * sizeof(float);
  ASSIGN_OR_RETURN(norms_device_, device_->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                    norm_bytes, "grad norms"));
  ASSIGN_OR_RETURN(norms_host_,
                   device_->Allocate(Tier::kHost, StateKind::kWorkspace, norm_bytes, "grad norms"));
  ASSIGN_OR_RETURN(loss_device_, device_->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                   world * sizeof(float), "losses of ranks"));
  ASSIGN_OR_RETURN(loss_host_, device_->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                 world * sizeof(float), "losses of ranks"));

  ctx_.device = device_;
  ctx_.ops = ops_;
  ctx_.stream = compute_.get();
  ctx_.params.assign(num_units, nullptr);
  ctx_.grads.assign(num_units, nullptr);
  ctx_.batch = B;
  ctx_.seq_len = T;
  ctx_.inputs = tokens_device_.as<int32_t>();
  ctx_.targets = tokens_device_.as<int32_t>() + B * T;
  RETURN_IF_ERROR(SyncStreams());
  nvme_counted_ = NvmeCountsNow();  // the set-up's writes are not a step's traffic
  return absl::OkStatus();
}

void Engine::PlanSplit(const MicroBatch& batch) {
  for (size_t u = 0; u < units_.size(); ++u) {
    late_ranges_[u].clear();
    early_ranges_[u].clear();
    if (first_backward_stage_[u] == last_backward_stage_[u]) continue;
    // The late ranges, and the rest of the unit (padding included), final earlier.
    std::vector<ShardRange> late;
    size_t at = 0;
    for (const auto& [begin, end] : model_->LastStageRanges(
             static_cast<int>(u), batch.inputs, options_.train.micro_batch,
             options_.train.seq_len)) {
      late.push_back({begin, end});
      if (begin > at) early_ranges_[u].push_back({at, begin});
      at = end;
    }
    if (at < units_[u].padded_elements) early_ranges_[u].push_back({at, units_[u].padded_elements});
    if (early_ranges_[u].empty()) continue;  // nothing final early: no split
    late_ranges_[u] = std::move(late);
  }
}

Status Engine::RunStage(int stage, bool backward, int* access) {
  const StageSpec& spec = model_->stages()[stage];
  const int first_access = *access;
  for (size_t i = 0; i < spec.units.size(); ++i) {
    const int u = spec.units[i];
    ASSIGN_OR_RETURN(ctx_.params[u], components_.gatherer->Acquire(first_access + i, u));
    if (backward) {
      ASSIGN_OR_RETURN(ctx_.grads[u], components_.reducer->Grads(u));
      if (Split(u) && last_backward_stage_[u] == stage) {
        // The early landing reads the buffer this stage adds to.
        RETURN_IF_ERROR(device_->Wait(*compute_, components_.grad_home->ready(u)));
      }
    }
  }
  RETURN_IF_ERROR(backward ? model_->Backward(stage, ctx_) : model_->Forward(stage, ctx_));
  for (size_t i = 0; i < spec.units.size(); ++i) {
    const int u = spec.units[i];
    if (backward && Split(u) && first_backward_stage_[u] == stage) {
      // Every element but the late ranges is final: landed and stepped now, while the
      // rest of backward runs.
      RETURN_IF_ERROR(components_.reducer->LandEarly(u, early_ranges_[u]));
      RETURN_IF_ERROR(EarlyNormPart(u));
      RETURN_IF_ERROR(components_.stepper->StepRanges(u, *early_, early_ranges_[u]));
    }
    if (backward && Split(u) && last_backward_stage_[u] == stage) {
      RETURN_IF_ERROR(components_.reducer->FinishRanges(u, late_ranges_[u]));
      RETURN_IF_ERROR(NormPart(u));
      normed_[u] = true;
      RETURN_IF_ERROR(components_.stepper->StepRanges(u, *early_, late_ranges_[u]));
      stepped_[u] = true;
      ++split_units_;
    } else if (backward && last_backward_stage_[u] == stage) {
      RETURN_IF_ERROR(components_.reducer->UnitDone(u));
      if (last_micro_batch_ && components_.reducer->ReducesPerUnit()) {
        // The unit's sum is final: a host-tier home makes its norm part now, in its own
        // stream's order, instead of in one pass after backward.
        if (components_.grad_home->tier() == Tier::kHost) {
          RETURN_IF_ERROR(NormPart(u));
          normed_[u] = true;
        }
        if (early_ != nullptr) {
          RETURN_IF_ERROR(components_.stepper->Step(u, *early_));
          stepped_[u] = true;
        }
      }
      if (last_micro_batch_ && staged_[u]) {
        // Delayed update: the old params' last use is enqueued; the new ones replace them.
        staged_[u] = false;
        RETURN_IF_ERROR(components_.stepper->Publish(u, *compute_));
      }
    }
    RETURN_IF_ERROR(components_.gatherer->Release(first_access + i, u));
    ctx_.params[u] = nullptr;
    ctx_.grads[u] = nullptr;
  }
  *access += static_cast<int>(spec.units.size());
  return absl::OkStatus();
}

Status Engine::RunMicroBatch(const MicroBatch& batch, int index, float dloss,
                             double* forward_ms, double* backward_ms) {
  const size_t token_bytes = tokens_per_micro_batch_ * sizeof(int32_t);
  RETURN_IF_ERROR(device_->CopyAsync(const_cast<int32_t*>(ctx_.inputs), batch.inputs,
                                     token_bytes, *compute_));
  RETURN_IF_ERROR(device_->CopyAsync(const_cast<int32_t*>(ctx_.targets), batch.targets,
                                     token_bytes, *compute_));
  ctx_.dloss = dloss;
  const int num_stages = static_cast<int>(model_->stages().size());
  int access = 0;
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < num_stages; ++s) RETURN_IF_ERROR(RunStage(s, false, &access));
  if (delayed_ && index == 0 && dloss != 0.0f) {
    // Delayed update: the previous step's norm (made during this forward) sets the scale
    // of its AdamW, which now runs during this step; the sums start over after that AdamW
    // has read them (host-stream order).
    RETURN_IF_ERROR(StepPending());
    RETURN_IF_ERROR(components_.reducer->Zero());
  }
  RETURN_IF_ERROR(device_->CopyAsync(losses_host_.as<float>() + index * tokens_per_micro_batch_,
                                     model_->losses(),
                                     tokens_per_micro_batch_ * sizeof(float), *compute_));
  if (dloss == 0.0f) {
    RETURN_IF_ERROR(components_.gatherer->EndMicroBatch());
    return compute_->Synchronize();
  }
  RETURN_IF_ERROR(compute_->Synchronize());
  if (forward_ms) *forward_ms += MillisecondsSince(start);
  start = std::chrono::steady_clock::now();
  // Params updated during this backward (early or delayed updates) are all-gathered after
  // it, so the gradient reductions on the comm stream never wait for a CPU Adam.
  RETURN_IF_ERROR(components_.stepper->HoldGathers(true));
  for (int s = num_stages - 1; s >= 0; --s) RETURN_IF_ERROR(RunStage(s, true, &access));
  RETURN_IF_ERROR(components_.reducer->BackwardDone());
  RETURN_IF_ERROR(components_.stepper->HoldGathers(false));
  RETURN_IF_ERROR(components_.gatherer->EndMicroBatch());
  RETURN_IF_ERROR(compute_->Synchronize());
  backward_end_ = std::chrono::steady_clock::now();
  if (backward_ms) *backward_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

StatusOr<double> Engine::GlobalMeanLoss(int micro_batches) {
  double total = 0.0;
  const float* losses = losses_host_.as<float>();
  for (int i = 0; i < micro_batches * tokens_per_micro_batch_; ++i) total += losses[i];
  const float mine = static_cast<float>(total / (micro_batches * tokens_per_micro_batch_));
  const int world = communicator_->world_size();
  const int rank = communicator_->rank();
  // Every rank's mean, gathered, then averaged in rank order: the same number everywhere.
  loss_host_.as<float>()[rank] = mine;
  RETURN_IF_ERROR(device_->CopyAsync(loss_device_.as<float>() + rank, loss_host_.as<float>() + rank,
                                     sizeof(float), *comm_));
  RETURN_IF_ERROR(communicator_->AllGather(loss_device_.as<float>() + rank, loss_device_.data(), 1,
                                           DType::kF32, *comm_));
  RETURN_IF_ERROR(device_->CopyAsync(loss_host_.data(), loss_device_.data(),
                                     world * sizeof(float), *comm_));
  RETURN_IF_ERROR(comm_->Synchronize());
  double sum = 0.0;
  for (int r = 0; r < world; ++r) sum += loss_host_.as<float>()[r];
  return sum / world;
}

StatusOr<double> Engine::ComputeGradients(const std::vector<MicroBatch>& micro_batches) {
  return RunGradients(micro_batches, nullptr);
}

StatusOr<double> Engine::RunGradients(const std::vector<MicroBatch>& micro_batches,
                                      const AdamParams* early) {
  if (static_cast<int>(micro_batches.size()) > options_.train.grad_accum ||
      micro_batches.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1..", options_.train.grad_accum,
                                                   " micro-batches, got ",
                                                   micro_batches.size()));
  }
  if (!delayed_) RETURN_IF_ERROR(components_.reducer->Zero());
  // Early norm parts start at 0, in host-stream order (the stream that writes them).
  RETURN_IF_ERROR(device_->MemsetAsync(
      norms_device_.as<float>() + communicator_->rank() * 2 * units_.size() + units_.size(), 0,
      units_.size() * sizeof(float), *host_));
  const float dloss = 1.0f / static_cast<float>(static_cast<double>(tokens_per_micro_batch_) *
                                                micro_batches.size() *
                                                communicator_->world_size());
  last_forward_ms_ = last_backward_ms_ = 0.0;
  stepped_.assign(units_.size(), false);
  normed_.assign(units_.size(), false);
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    // Only the last micro-batch completes the gradient sums.
    last_micro_batch_ = k + 1 == micro_batches.size();
    early_ = last_micro_batch_ ? early : nullptr;
    if (early_ != nullptr && split_allowed_) {
      PlanSplit(micro_batches[k]);
    } else {
      for (auto& ranges : late_ranges_) ranges.clear();
    }
    // Each unit is stepped right after its last Add: an NVMe grad home hands the sums
    // over in memory instead of writing them out for the optimizer to read back.
    RETURN_IF_ERROR(
        components_.grad_home->KeepFinalSums(early_ != nullptr && placement_.nvme_handover));
    Status status = RunMicroBatch(micro_batches[k], static_cast<int>(k), dloss,
                                  &last_forward_ms_, &last_backward_ms_);
    status.Update(components_.grad_home->KeepFinalSums(false));
    last_micro_batch_ = false;
    early_ = nullptr;
    RETURN_IF_ERROR(status);
  }
  return GlobalMeanLoss(static_cast<int>(micro_batches.size()));
}

Status Engine::NormPart(int unit) {
  const UnitState& state = units_[unit];
  const ShardRange range = OwnedRange(state, communicator_->rank());
  const size_t first = components_.sharded_optimizer ? 0 : range.begin;
  float* slot = norms_device_.as<float>() + communicator_->rank() * 2 * units_.size() + unit;
  if (Split(unit)) {
    // The split unit's late ranges only; the rest was summed when it landed early.
    return components_.grad_home->SquaredNormRanges(unit, late_ranges_[unit], slot);
  }
  return components_.grad_home->SquaredNorm(unit, first, range.end - range.begin, slot);
}

Status Engine::EarlyNormPart(int unit) {
  float* slot = norms_device_.as<float>() + communicator_->rank() * 2 * units_.size() +
                units_.size() + unit;
  return components_.grad_home->SquaredNormRanges(unit, early_ranges_[unit], slot);
}

Status Engine::EnqueueNorms() {
  const int num_units = static_cast<int>(units_.size());
  float* mine = norms_device_.as<float>() + communicator_->rank() * 2 * num_units;
  for (int u = 0; u < num_units; ++u) {
    if (!normed_[u]) RETURN_IF_ERROR(NormPart(u));
  }
  // The parts come from the compute stream (device sums) and the host stream (host sums).
  RETURN_IF_ERROR(Join(*device_, *comm_, *compute_, *norms_join_));
  RETURN_IF_ERROR(Join(*device_, *comm_, *host_, *norms_join_));
  RETURN_IF_ERROR(communicator_->AllGather(mine, norms_device_.data(), 2 * num_units, DType::kF32,
                                           *comm_));
  RETURN_IF_ERROR(device_->CopyAsync(norms_host_.data(), norms_device_.data(),
                                     norms_device_.bytes(), *comm_));
  return device_->Record(*norms_ready_, *comm_);
}

StatusOr<double> Engine::ScaleFromNorms(double* grad_norm) {
  RETURN_IF_ERROR(norms_ready_->Synchronize());
  RETURN_IF_ERROR(comm_->Synchronize());  // the first error of the norms' path, if any
  const int num_units = static_cast<int>(units_.size());
  const int world = communicator_->world_size();
  double sum = 0.0;
  for (int u = 0; u < num_units; ++u) {
    for (int r = 0; r < world; ++r) {
      const float* part = norms_host_.as<float>() + r * 2 * num_units;
      sum += part[u];
      sum += part[num_units + u];  // a split unit's early part (0.0 adds nothing otherwise)
    }
  }
  *grad_norm = std::sqrt(sum);
  if (!std::isfinite(*grad_norm)) {
    // A failed transfer leaves garbage behind: its error explains the norm better.
    for (Stream* stream : {copy_.get(), host_.get(), compute_.get()}) {
      RETURN_IF_ERROR(stream->Synchronize());
    }
    return absl::DataLossError(absl::StrCat("gradient norm is not finite (", *grad_norm,
                                            "): training diverged; lower train.lr"));
  }
  const double clip = options_.train.grad_clip;
  if (clip > 0.0 && *grad_norm > clip) return clip / (*grad_norm + 1e-6);
  return 1.0;
}

StatusOr<double> Engine::ClipScale(double* grad_norm) {
  RETURN_IF_ERROR(EnqueueNorms());
  return ScaleFromNorms(grad_norm);
}

Status Engine::StepPending() {
  if (!pending_) return absl::OkStatus();
  pending_ = false;
  ASSIGN_OR_RETURN(double scale, ScaleFromNorms(&applied_norm_));
  pending_params_.grad_scale = static_cast<float>(scale);
  for (size_t u = 0; u < units_.size(); ++u) {
    RETURN_IF_ERROR(components_.stepper->StepStaged(static_cast<int>(u), pending_params_));
    staged_[u] = true;
  }
  return absl::OkStatus();
}

StatusOr<StepResult> Engine::TrainStep(const std::vector<MicroBatch>& micro_batches, float lr,
                                       int step) {
  if (static_cast<int>(micro_batches.size()) != options_.train.grad_accum) {
    return absl::InvalidArgumentError(absl::StrCat("train.grad_accum is ",
                                                   options_.train.grad_accum, " but ",
                                                   micro_batches.size(), " micro-batches came"));
  }
  StepResult result;
  const GatherStats gather_before = components_.gatherer->stats();
  const double stall_before = compute_->stalled_ms();
  const double busy_before = components_.stepper->busy_ms();
  const double compute_busy_before = compute_->busy_ms();
  AdamParams params;
  params.lr = lr;
  params.beta1 = options_.train.beta1;
  params.beta2 = options_.train.beta2;
  params.eps = options_.train.eps;
  params.weight_decay = options_.train.weight_decay;
  params.step = step + 1;
  // Without clipping the scale is known before backward: an optimizer off the compute
  // stream (host) may then step each unit as soon as its gradient sum is final.
  const bool early = placement_.early_step;
  applied_norm_ = 0.0;  // delayed: set if this step enqueues the previous one's update
  split_units_ = 0;
  ASSIGN_OR_RETURN(result.loss, RunGradients(micro_batches, early ? &params : nullptr));
  result.forward_ms = last_forward_ms_;
  result.backward_ms = last_backward_ms_;
  const double compute_busy = compute_->busy_ms() - compute_busy_before;
  if (compute_busy > 0.0) {
    result.compute_idle_ms =
        std::max(0.0, result.forward_ms + result.backward_ms - compute_busy);
  }
  if (delayed_) {
    // Delayed update: nothing waits here. The norm is reduced in the background; the next
    // step reads it during its forward and enqueues this step's AdamW (StepPending). The
    // norm reported is that of the update enqueued during this step (the previous
    // step's gradient; 0 where there was none).
    RETURN_IF_ERROR(EnqueueNorms());
    pending_ = true;
    pending_params_ = params;
    result.grad_norm = applied_norm_;
  } else {
    ASSIGN_OR_RETURN(double scale, ClipScale(&result.grad_norm));
    params.grad_scale = static_cast<float>(scale);
    // The remaining sub-steps in forward order, so the next forward's first units come
    // back first; their param copies (and stage 1-2 gathers) overlap with the next forward.
    for (size_t u = 0; u < units_.size(); ++u) {
      if (stepped_[u]) continue;
      if (early && scale != 1.0) {
        return absl::InternalError("early optimizer steps with clipping");
      }
      RETURN_IF_ERROR(components_.stepper->Step(static_cast<int>(u), params));
    }
    RETURN_IF_ERROR(components_.stepper->WaitSteps());
  }
  RETURN_IF_ERROR(compute_->Synchronize());
  result.optimizer_exposed_ms = MillisecondsSince(backward_end_);
  result.optimizer_ms = components_.stepper->busy_ms() - busy_before;
  const NvmeCounts now = NvmeCountsNow();
  result.nvme_read_bytes = now.read - nvme_counted_.read;
  result.nvme_written_bytes = now.written - nvme_counted_.written;
  result.nvme_busy_ms = now.busy_ms - nvme_counted_.busy_ms;
  result.param_nvme_busy_ms = now.param_busy_ms - nvme_counted_.param_busy_ms;
  nvme_counted_ = now;
  result.split_units = split_units_;
  const GatherStats gather_after = components_.gatherer->stats();
  result.gather.gathers = gather_after.gathers - gather_before.gathers;
  result.gather.deviations = gather_after.deviations - gather_before.deviations;
  result.compute_stall_ms = compute_->stalled_ms() - stall_before;
  return result;
}

StatusOr<double> Engine::EvalLoss(const MicroBatch& batch) {
  RETURN_IF_ERROR(PublishStaged());
  RETURN_IF_ERROR(RunMicroBatch(batch, 0, 0.0f, nullptr, nullptr));
  return GlobalMeanLoss(1);
}

StatusOr<std::vector<float>> Engine::ReadFull(int unit, std::vector<float> own_part) {
  const UnitState& state = units_[unit];
  if (!components_.sharded_optimizer) return own_part;  // already the full unit
  std::vector<float> values(state.padded_elements);
  ASSIGN_OR_RETURN(Buffer full, device_->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                  values.size() * sizeof(float), "unit read-out"));
  // The own shard into its place, then gathered in place.
  float* own = full.as<float>() + communicator_->rank() * state.shard_elements;
  RETURN_IF_ERROR(device_->CopyAsync(own, own_part.data(), state.shard_elements * sizeof(float),
                                     *comm_));
  RETURN_IF_ERROR(communicator_->AllGather(own, full.data(), state.shard_elements, DType::kF32,
                                           *comm_));
  RETURN_IF_ERROR(device_->CopyAsync(values.data(), full.data(), values.size() * sizeof(float),
                                     *comm_));
  RETURN_IF_ERROR(comm_->Synchronize());
  return values;
}

size_t Engine::StateElements(int unit) const {
  const UnitState& state = units_[unit];
  return components_.sharded_optimizer ? state.shard_elements : state.padded_elements;
}

StatusOr<std::vector<float>> Engine::ReadMaster(int unit) {
  RETURN_IF_ERROR(SyncStreams());
  std::vector<float> own(StateElements(unit));
  RETURN_IF_ERROR(components_.optimizer_home->LoadState(unit, own.data(), nullptr, nullptr));
  return ReadFull(unit, std::move(own));
}

StatusOr<std::vector<float>> Engine::ReadGradients(int unit) {
  RETURN_IF_ERROR(SyncStreams());
  std::vector<float> own(StateElements(unit));
  RETURN_IF_ERROR(components_.grad_home->ReadSums(unit, own.data()));
  return ReadFull(unit, std::move(own));
}

StatusOr<Engine::UnitOptimizerState> Engine::ReadOptimizerState(int unit) {
  RETURN_IF_ERROR(SyncStreams());
  const size_t n = StateElements(unit);
  std::vector<float> master(n), exp_avg(n), exp_avg_sq(n);
  RETURN_IF_ERROR(components_.optimizer_home->LoadState(unit, master.data(), exp_avg.data(),
                                                        exp_avg_sq.data()));
  UnitOptimizerState out;
  ASSIGN_OR_RETURN(out.master, ReadFull(unit, std::move(master)));
  ASSIGN_OR_RETURN(out.exp_avg, ReadFull(unit, std::move(exp_avg)));
  ASSIGN_OR_RETURN(out.exp_avg_sq, ReadFull(unit, std::move(exp_avg_sq)));
  nvme_counted_ = NvmeCountsNow();  // not a step's traffic
  return out;
}

Status Engine::WriteMaster(int unit, const std::vector<float>& values) {
  return WriteOptimizerState(unit, {values, {}, {}});
}

Status Engine::WriteOptimizerState(int unit, const UnitOptimizerState& full_state) {
  Status status = StoreUnitState(unit, full_state);
  nvme_counted_ = NvmeCountsNow();  // not a step's traffic
  return status;
}

Status Engine::StoreUnitState(int unit, const UnitOptimizerState& full_state) {
  UnitState& state = units_[unit];
  const std::vector<float>& values = full_state.master;
  for (const std::vector<float>* array :
       {&full_state.master, &full_state.exp_avg, &full_state.exp_avg_sq}) {
    const bool moments_left_out = array != &full_state.master && array->empty();
    if (array->size() != state.padded_elements && !moments_left_out) {
      return absl::InvalidArgumentError(absl::StrCat("unit ", unit, " has ", state.padded_elements,
                                                     " elements, got ", array->size()));
    }
  }
  RETURN_IF_ERROR(SyncStreams());
  const int rank = communicator_->rank();
  const ShardRange own = OwnedRange(state, rank);
  // The optimizer state (full or own shard); moments not given start at zero.
  const size_t offset = components_.sharded_optimizer ? own.begin : 0;
  auto part = [offset](const std::vector<float>& array) {
    return array.empty() ? nullptr : array.data() + offset;
  };
  RETURN_IF_ERROR(components_.optimizer_home->StoreState(
      unit, part(values), part(full_state.exp_avg), part(full_state.exp_avg_sq)));
  // The params (full, or the own shard for stage 3), cast from fp32 on the device.
  const size_t element_bytes = DTypeBytes(options_.train.dtype);
  const bool full = !components_.params_on_nvme && state.params.bytes() / element_bytes ==
                                                       state.padded_elements;
  const size_t param_elements = full ? state.padded_elements : state.shard_elements;
  const float* param_src = values.data() + (full ? 0 : own.begin);
  ASSIGN_OR_RETURN(Buffer staging, device_->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                     param_elements * sizeof(float),
                                                     "parameter staging"));
  ASSIGN_OR_RETURN(Buffer cast, device_->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                  param_elements * element_bytes,
                                                  "parameter cast"));
  RETURN_IF_ERROR(device_->CopyAsync(staging.data(), param_src, param_elements * sizeof(float),
                                     *compute_));
  RETURN_IF_ERROR(ops_->CastFromFloat(*compute_, cast.data(), staging.as<float>(),
                                      param_elements));
  if (!components_.params_on_nvme) {
    RETURN_IF_ERROR(device_->CopyAsync(state.params.data(), cast.data(), cast.bytes(),
                                       *compute_));
    return compute_->Synchronize();
  }
  // Param shard on nvme, chunk by chunk, through an aligned host buffer.
  NvmeTier& nvme = *components_.param_nvme;
  const std::vector<NvmeChunk>& chunks = components_.nvme_chunks[unit];
  const NvmeChunk& last = chunks.back();
  ASSIGN_OR_RETURN(Buffer host,
                   device_->Allocate(Tier::kHost, StateKind::kWorkspace,
                                     last.begin * element_bytes +
                                         nvme.PaddedBytes(last.id, ExtentKind::kParams),
                                     "param shard write"));
  std::memset(host.data(), 0, host.bytes());
  RETURN_IF_ERROR(device_->CopyAsync(host.data(), cast.data(), cast.bytes(), *compute_));
  RETURN_IF_ERROR(compute_->Synchronize());
  for (const NvmeChunk& chunk : chunks) {
    RETURN_IF_ERROR(nvme.Wait(nvme.Write(
        chunk.id, {{ExtentKind::kParams, host.as<char>() + chunk.begin * element_bytes}})));
  }
  return absl::OkStatus();
}

}  // namespace strata
