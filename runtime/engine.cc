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

#include "kernels/dropout_mask.h"
#include "runtime/quantized_base.h"
#include "tiers/stream_helpers.h"


namespace strata {
namespace {

// Never 0 (0 = no dropout): SplitMix64 over the seed, the step and the micro-batch.
uint64_t DropoutKey(uint64_t seed, int step, int micro_batch) {
  auto mix = [](uint64_t x) { return DropoutMix(x + kDropoutGamma); };
  const uint64_t key =
      mix(mix(seed ^ 0x6c6f7261ull) ^ (static_cast<uint64_t>(step) << 20 | micro_batch));
  return key == 0 ? 1 : key;
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Engine::Engine(const EngineConfig& config, Device* device, Ops* ops, Ops* host_ops,
               Model* model, Communicator* communicator, ShardGroups groups)
    : config_(config), device_(device), ops_(ops), host_ops_(host_ops), model_(model),
      communicator_(communicator),
      shards_(groups.shards != nullptr ? groups.shards : communicator),
      replicas_(groups.replicas),
      state_(EngineState::Parts{config_, device_, ops_, host_ops_, model_, shards_,
                                &compute_, &comm_, &host_, units_, stored_, components_,
                                traffic_counted_, [this] { return SyncStreams(); }}) {}

Engine::~Engine() {
  // Work in flight may still reference buffers owned here.
  for (Stream* stream : {host_.get(), copy_.get(), comm_.get(), compute_.get()}) {
    if (stream) stream->Synchronize().IgnoreError();
  }
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config, Device* device,
                                                 Ops* ops, Ops* host_ops, Model* model,
                                                 Communicator* communicator,
                                                 InitialState initial, ShardGroups groups) {
  if (ops == nullptr || host_ops == nullptr) return absl::InvalidArgumentError("no kernels");
  if (ops->dtype() != config.dtype || host_ops->dtype() != config.dtype) {
    return absl::InvalidArgumentError("the kernels' dtype differs from train.dtype");
  }
  if (communicator == nullptr) return absl::InvalidArgumentError("no communicator");
  if (config.placement.world != communicator->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the engine's placement is for ", config.placement.world, " ranks, the communicator has ",
        communicator->world_size()));
  }
  if ((groups.shards == nullptr) != (groups.replicas == nullptr)) {
    return absl::InvalidArgumentError("hybrid sharding needs both the shard and replica groups");
  }
  if (groups.shards != nullptr &&
      groups.shards->world_size() * groups.replicas->world_size() != communicator->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid sharding: ", groups.shards->world_size(), " ranks per shard group times ",
        groups.replicas->world_size(), " replicas is not the world of ",
        communicator->world_size()));
  }
  std::unique_ptr<Engine> engine(
      new Engine(config, device, ops, host_ops, model, communicator, groups));
  RETURN_IF_ERROR(engine->Init(initial));
  return engine;
}

Status Engine::SyncStreams() {
  // Pending updates in place, every stream, each to its end, then the state's write-backs;
  // the first error wins.
  Status status = schedule_ != nullptr ? schedule_->Settle() : absl::OkStatus();
  for (Stream* stream : {host_.get(), copy_.get(), comm_.get(), compute_.get()}) {
    status.Update(stream->Synchronize());
  }
  if (schedule_ != nullptr) status.Update(components_.Flush());
  return status;
}

Status Engine::Init(InitialState initial) {
  ASSIGN_OR_RETURN(compute_, device_->CreateStream("compute"));
  ASSIGN_OR_RETURN(comm_, device_->CreateStream("comm"));
  ASSIGN_OR_RETURN(copy_, device_->CreateStream("copy"));
  ASSIGN_OR_RETURN(host_, device_->CreateStream("cpu-optimizer"));
  const auto& layouts = model_->units();
  const auto& stages = model_->stages();
  const int num_units = static_cast<int>(layouts.size());

  // The access trace, and for each unit its first backward stage and the one that
  // completes its gradient.
  ScheduleContext schedule;
  schedule.last_backward_stage.assign(num_units, -1);
  schedule.first_backward_stage.assign(num_units, -1);
  for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
    for (int u : stages[s].units) trace_.push_back({s, u, false});
  }
  for (int s = static_cast<int>(stages.size()) - 1; s >= 0; --s) {
    for (int u : stages[s].units) {
      trace_.push_back({s, u, true});
      schedule.last_backward_stage[u] = s;
      if (schedule.first_backward_stage[u] < 0) schedule.first_backward_stage[u] = s;
    }
  }
  for (int u = 0; u < num_units; ++u) {
    if (schedule.last_backward_stage[u] < 0) {
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
  zero.communicator = shards_;
  zero.replicas = replicas_;
  zero.world_rank = communicator_->rank();
  // A quantized base's frozen units are kept, moved and gathered in their stored form.
  stored_ = StoredUnits(layouts, config_.base_dtype, config_.dtype);
  stored_layouts_.clear();
  for (int u = 0; u < num_units; ++u) stored_layouts_.push_back(stored_[u].StoredLayout(layouts[u]));
  dequantized_.assign(num_units, nullptr);
  frees_ = std::make_unique<DeferredFrees>(device_);
  zero.layouts = &stored_layouts_;
  zero.units = &units_;
  zero.dtype = config_.dtype;
  zero.prefetch_bytes = config_.prefetch_bytes;
  for (const UnitAccess& access : trace_) zero.trace.push_back(access.unit);
  ASSIGN_OR_RETURN(components_, MakeZeroComponents(config_, zero));
  const EngineStreams streams{compute_.get(), comm_.get(), copy_.get(), host_.get()};
  std::vector<bool> frozen;
  for (const UnitLayout& unit : layouts) frozen.push_back(!unit.trainable());
  // The norm sums the parts of one shard group: with hybrid sharding every node holds the
  // whole (all-reduced) gradient, so its node is the whole.
  ASSIGN_OR_RETURN(norm_, GradNorm::Create(device_, shards_, streams, frozen));
  schedule.device = device_;
  schedule.streams = streams;
  schedule.components = &components_;
  schedule.norm = norm_.get();
  schedule.model = model_;
  schedule.grad_clip = config_.grad_clip;
  schedule.batch = config_.micro_batch;
  schedule.seq_len = config_.seq_len;
  schedule.units = &units_;
  ASSIGN_OR_RETURN(schedule_, StepSchedule::Create(config_.placement, schedule));

  // Initial values: fp32 master from the model (the same on every rank), cast to the
  // compute dtype; each rank keeps what it owns. One buffer for all units (fresh pages per
  // unit cost more than the init); none of it when a checkpoint is loaded next.
  if (initial == InitialState::kModelInit) {
    std::vector<float> values;
    for (int u = 0; u < num_units; ++u) {
      values.assign(state_.PaddedElements(u), 0.0f);
      model_->InitUnit(u, config_.seed, values.data());
      RETURN_IF_ERROR(state_.WriteMaster(u, values));
    }
  }

  const int B = config_.micro_batch, T = config_.seq_len;
  const int world = communicator_->world_size();
  tokens_per_micro_batch_ = B * T;
  RETURN_IF_ERROR(model_->PrepareActivations(*device_, B, T));
  ASSIGN_OR_RETURN(tokens_device_, device_->Allocate(Tier::kDevice, StateKind::kActivations,
                                                     2 * B * T * sizeof(int32_t), "token ids"));
  ASSIGN_OR_RETURN(losses_host_,
                   device_->Allocate(Tier::kHost, StateKind::kWorkspace,
                                     static_cast<size_t>(config_.grad_accum) * B * T * sizeof(float), "losses"));
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
  ctx_.first_row = static_cast<int64_t>(communicator_->rank()) * B;
  ctx_.inputs = tokens_device_.as<int32_t>();
  ctx_.targets = tokens_device_.as<int32_t>() + B * T;
  RETURN_IF_ERROR(SyncStreams());
  traffic_counted_ = components_.traffic();  // the set-up's writes are not a step's traffic
  return absl::OkStatus();
}

// Plain forward or backward of one stage: its units' params acquired (and, backward,
// their gradient buffers), the model's compute, then each unit released; the schedule
// sees each unit's backward.
Status Engine::RunStage(int stage, bool backward, int* access) {
  const StageSpec& spec = model_->stages()[stage];
  ParamGatherer& gatherer = components_.gatherer();
  const int first_access = *access;
  for (size_t i = 0; i < spec.units.size(); ++i) {
    const int u = spec.units[i];
    ASSIGN_OR_RETURN(ctx_.params[u], gatherer.Acquire(first_access + i, u));
    if (stored_[u].packed()) {
      ASSIGN_OR_RETURN(ctx_.params[u], Dequantize(u, ctx_.params[u]));
    }
    // A frozen unit's grads stay null: the model computes only its input gradients.
    if (backward && model_->units()[u].trainable()) {
      ASSIGN_OR_RETURN(ctx_.grads[u], components_.reducer().Grads(u));
      RETURN_IF_ERROR(schedule_->BeforeBackward(stage, u));
    }
  }
  std::string units;
  for (const int u : spec.units) {
    absl::StrAppend(&units, units.empty() ? "" : " ", model_->units()[u].name());
  }
  {
    StreamLabel label(*compute_, absl::StrCat(backward ? "backward " : "forward ", units),
                      backward ? "backward" : "forward");
    RETURN_IF_ERROR(backward ? model_->Backward(stage, ctx_) : model_->Forward(stage, ctx_));
  }
  for (size_t i = 0; i < spec.units.size(); ++i) {
    const int u = spec.units[i];
    if (backward && model_->units()[u].trainable()) {
      RETURN_IF_ERROR(schedule_->AfterBackward(stage, u));
    }
    RETURN_IF_ERROR(gatherer.Release(first_access + i, u));
    if (dequantized_[u] != nullptr) {
      RETURN_IF_ERROR(frees_->Add(*compute_, std::move(dequantized_[u])));
      dequantized_[u] = nullptr;
    }
    ctx_.params[u] = nullptr;
    ctx_.grads[u] = nullptr;
  }
  *access += static_cast<int>(spec.units.size());
  return absl::OkStatus();
}

StatusOr<const void*> Engine::Dequantize(int unit, const void* stored) {
  const UnitLayout& layout = model_->units()[unit];
  // One unit's dequantized params in use and one on its way out at most, however far the
  // host runs ahead of the compute stream (stages 0-2 have no prefetch plan bounding it):
  // never the whole base dequantized at once.
  RETURN_IF_ERROR(frees_->Bound(1));
  ASSIGN_OR_RETURN(Buffer values,
                   device_->Allocate(Tier::kDevice, StateKind::kParams,
                                     layout.used_elements() * DTypeBytes(config_.dtype),
                                     layout.name() + " dequantized params"));
  dequantized_[unit] = std::make_shared<Buffer>(std::move(values));
  StreamLabel label(*compute_, "dequantize " + layout.name(), "dequantize");
  RETURN_IF_ERROR(DequantizeUnit(*ops_, *device_, *compute_, stored_[unit], layout, stored,
                                 dequantized_[unit]->data()));
  return static_cast<const void*>(dequantized_[unit]->data());
}

Status Engine::RunMicroBatch(const MicroBatch& batch, int index, float dloss,
                             double* forward_ms, double* backward_ms) {
  const size_t token_bytes = tokens_per_micro_batch_ * sizeof(int32_t);
  RETURN_IF_ERROR(device_->CopyAsync(const_cast<int32_t*>(ctx_.inputs), batch.inputs,
                                     token_bytes, *compute_));
  RETURN_IF_ERROR(device_->CopyAsync(const_cast<int32_t*>(ctx_.targets), batch.targets,
                                     token_bytes, *compute_));
  ctx_.dloss = dloss;
  // A training micro-batch draws its dropout masks from (seed, step, micro-batch); the
  // model keys each row by its global row, so every world size draws the same.
  ctx_.dropout_key = 0;
  if (dloss != 0.0f && config_.lora_dropout > 0.0f) {
    ctx_.dropout_key = DropoutKey(config_.seed, dropout_step_, index);
  }
  const int num_stages = static_cast<int>(model_->stages().size());
  int access = 0;
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < num_stages; ++s) RETURN_IF_ERROR(RunStage(s, false, &access));
  if (dloss != 0.0f) RETURN_IF_ERROR(schedule_->AfterForward(index));
  RETURN_IF_ERROR(device_->CopyAsync(losses_host_.as<float>() + index * tokens_per_micro_batch_,
                                     model_->losses(),
                                     tokens_per_micro_batch_ * sizeof(float), *compute_));
  ParamGatherer& gatherer = components_.gatherer();
  if (dloss == 0.0f) {
    RETURN_IF_ERROR(gatherer.EndMicroBatch());
    return compute_->Synchronize();
  }
  RETURN_IF_ERROR(compute_->Synchronize());
  if (forward_ms) *forward_ms += MillisecondsSince(start);
  start = std::chrono::steady_clock::now();
  // Params updated during this backward (early or delayed updates) are all-gathered after
  // it, so the gradient reductions on the comm stream never wait for a CPU Adam.
  OptimizerStepper& stepper = components_.stepper();
  RETURN_IF_ERROR(stepper.HoldGathers(true));
  for (int s = num_stages - 1; s >= 0; --s) RETURN_IF_ERROR(RunStage(s, true, &access));
  RETURN_IF_ERROR(components_.reducer().BackwardDone());
  RETURN_IF_ERROR(stepper.HoldGathers(false));
  RETURN_IF_ERROR(gatherer.EndMicroBatch());
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
  dropout_step_ = 0;
  return RunGradients(micro_batches, nullptr);
}

StatusOr<double> Engine::RunGradients(const std::vector<MicroBatch>& micro_batches,
                                      const AdamParams* params) {
  if (static_cast<int>(micro_batches.size()) > config_.grad_accum ||
      micro_batches.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1..", config_.grad_accum,
                                                   " micro-batches, got ",
                                                   micro_batches.size()));
  }
  RETURN_IF_ERROR(schedule_->BeginGradients(params));
  const float dloss = 1.0f / static_cast<float>(static_cast<double>(tokens_per_micro_batch_) *
                                                micro_batches.size() *
                                                communicator_->world_size());
  last_forward_ms_ = last_backward_ms_ = 0.0;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    // Only the last micro-batch completes the gradient sums.
    const bool last = k + 1 == micro_batches.size();
    RETURN_IF_ERROR(schedule_->BeginMicroBatch(micro_batches[k], static_cast<int>(k), last));
    Status status = RunMicroBatch(micro_batches[k], static_cast<int>(k), dloss,
                                  &last_forward_ms_, &last_backward_ms_);
    status.Update(schedule_->EndMicroBatch());
    RETURN_IF_ERROR(status);
  }
  return GlobalMeanLoss(static_cast<int>(micro_batches.size()));
}

StatusOr<StepResult> Engine::TrainStep(const std::vector<MicroBatch>& micro_batches, float lr,
                                       int step) {
  if (static_cast<int>(micro_batches.size()) != config_.grad_accum) {
    return absl::InvalidArgumentError(absl::StrCat("train.grad_accum is ",
                                                   config_.grad_accum, " but ",
                                                   micro_batches.size(), " micro-batches came"));
  }
  StepResult result;
  OptimizerStepper& stepper = components_.stepper();
  const GatherStats gather_before = components_.gatherer().stats();
  const double stall_before = compute_->stalled_ms();
  const double busy_before = stepper.busy_ms();
  const IdleMeter compute_idle(*compute_);
  const uint64_t driver_calls_before = device_->driver_calls();
  AdamParams params;
  params.lr = lr;
  params.beta1 = config_.beta1;
  params.beta2 = config_.beta2;
  params.eps = config_.eps;
  params.weight_decay = config_.weight_decay;
  params.step = step + 1;
  dropout_step_ = step;
  ASSIGN_OR_RETURN(result.loss, RunGradients(micro_batches, &params));
  result.forward_ms = last_forward_ms_;
  result.backward_ms = last_backward_ms_;
  result.compute_idle_ms = compute_idle.IdleMs(result.forward_ms + result.backward_ms);
  ASSIGN_OR_RETURN(result.grad_norm, schedule_->FinishStep(params));
  RETURN_IF_ERROR(compute_->Synchronize());
  result.optimizer_exposed_ms = MillisecondsSince(backward_end_);
  result.optimizer_ms = stepper.busy_ms() - busy_before;
  const NvmeTraffic now = components_.traffic();
  result.nvme_read_bytes = now.read_bytes - traffic_counted_.read_bytes;
  result.nvme_written_bytes = now.written_bytes - traffic_counted_.written_bytes;
  result.param_nvme_read_bytes = now.param_read_bytes - traffic_counted_.param_read_bytes;
  result.param_nvme_written_bytes =
      now.param_written_bytes - traffic_counted_.param_written_bytes;
  result.nvme_busy_ms = now.busy_ms - traffic_counted_.busy_ms;
  result.param_nvme_busy_ms = now.param_busy_ms - traffic_counted_.param_busy_ms;
  traffic_counted_ = now;
  result.split_units = schedule_->split_units();
  const GatherStats gather_after = components_.gatherer().stats();
  result.gather.gathers = gather_after.gathers - gather_before.gathers;
  result.gather.deviations = gather_after.deviations - gather_before.deviations;
  result.compute_stall_ms = compute_->stalled_ms() - stall_before;
  result.driver_calls = device_->driver_calls() - driver_calls_before;
  return result;
}

StatusOr<double> Engine::EvalLoss(const MicroBatch& batch) {
  RETURN_IF_ERROR(schedule_->Settle());
  RETURN_IF_ERROR(RunMicroBatch(batch, 0, 0.0f, nullptr, nullptr));
  return GlobalMeanLoss(1);
}

}  // namespace strata
