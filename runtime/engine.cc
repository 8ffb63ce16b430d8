// Engine: micro-batch loop, unit-by-unit forward/backward through the ZeRO components,
// global-norm clipping and the optimizer sub-steps. See engine.h.
#include "runtime/engine.h"

#include <chrono>
#include <cmath>

namespace strata {
namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Engine::Engine(const Options& options, Device* device, Ops* ops, Model* model)
    : options_(options), device_(device), ops_(ops), model_(model) {}

Engine::~Engine() {
  // Work in flight may still reference buffers owned here.
  if (compute_) compute_->Synchronize().IgnoreError();
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Options& options, Device* device,
                                                 Ops* ops, Model* model) {
  if (ops->dtype() != options.train.dtype) {
    return absl::InvalidArgumentError("the kernels' dtype differs from train.dtype");
  }
  std::unique_ptr<Engine> engine(new Engine(options, device, ops, model));
  RETURN_IF_ERROR(engine->Init());
  return engine;
}

Status Engine::Init() {
  ASSIGN_OR_RETURN(compute_, device_->CreateStream("compute"));
  const auto& layouts = model_->units();
  const auto& stages = model_->stages();
  const int num_units = static_cast<int>(layouts.size());

  ZeroContext zero;
  zero.device = device_;
  zero.ops = ops_;
  zero.compute = compute_.get();
  zero.layouts = &layouts;
  zero.units = &units_;
  zero.dtype = options_.train.dtype;
  zero.world_size = options_.zero.world;
  ASSIGN_OR_RETURN(components_, MakeZeroComponents(options_, zero));

  // The access trace, and for each unit the stage whose backward completes its gradient.
  last_backward_stage_.assign(num_units, -1);
  for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
    for (int u : stages[s].units) trace_.push_back({s, u, false});
  }
  for (int s = static_cast<int>(stages.size()) - 1; s >= 0; --s) {
    for (int u : stages[s].units) {
      trace_.push_back({s, u, true});
      last_backward_stage_[u] = s;
    }
  }
  for (int u = 0; u < num_units; ++u) {
    if (last_backward_stage_[u] < 0) {
      return absl::InternalError(absl::StrCat("unit '", layouts[u].name(), "' is used by no stage"));
    }
  }

  // Initial values: fp32 master from the model, cast to the compute dtype.
  for (int u = 0; u < num_units; ++u) {
    std::vector<float> values(units_[u].padded_elements, 0.0f);
    model_->InitUnit(u, options_.train.seed, values.data());
    RETURN_IF_ERROR(WriteMaster(u, values));
  }

  const int B = options_.train.micro_batch, T = options_.train.seq_len;
  tokens_per_micro_batch_ = B * T;
  RETURN_IF_ERROR(model_->PrepareActivations(*device_, B, T));
  ASSIGN_OR_RETURN(tokens_device_, device_->Allocate(Tier::kDevice, StateKind::kActivations,
                                                     2 * B * T * sizeof(int32_t), "token ids"));
  ASSIGN_OR_RETURN(losses_host_,
                   device_->Allocate(Tier::kHost, StateKind::kWorkspace,
                                     options_.train.grad_accum * B * T * sizeof(float), "losses"));
  ASSIGN_OR_RETURN(norms_device_, device_->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                    num_units * sizeof(float), "grad norms"));
  ASSIGN_OR_RETURN(norms_host_, device_->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                  num_units * sizeof(float), "grad norms"));

  ctx_.device = device_;
  ctx_.ops = ops_;
  ctx_.stream = compute_.get();
  ctx_.params.assign(num_units, nullptr);
  ctx_.grads.assign(num_units, nullptr);
  ctx_.batch = B;
  ctx_.seq_len = T;
  ctx_.inputs = tokens_device_.as<int32_t>();
  ctx_.targets = tokens_device_.as<int32_t>() + B * T;
  return compute_->Synchronize();
}

Status Engine::RunStage(int stage, bool backward) {
  const StageSpec& spec = model_->stages()[stage];
  for (int u : spec.units) {
    ASSIGN_OR_RETURN(ctx_.params[u], components_.gatherer->Acquire(u));
    ctx_.grads[u] = units_[u].grads.data();
  }
  RETURN_IF_ERROR(backward ? model_->Backward(stage, ctx_) : model_->Forward(stage, ctx_));
  for (int u : spec.units) {
    if (backward && last_backward_stage_[u] == stage) {
      RETURN_IF_ERROR(components_.reducer->Reduce(u));
    }
    RETURN_IF_ERROR(components_.gatherer->Release(u));
    ctx_.params[u] = nullptr;
    ctx_.grads[u] = nullptr;
  }
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
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < num_stages; ++s) RETURN_IF_ERROR(RunStage(s, false));
  RETURN_IF_ERROR(device_->CopyAsync(losses_host_.as<float>() + index * tokens_per_micro_batch_,
                                     model_->losses(),
                                     tokens_per_micro_batch_ * sizeof(float), *compute_));
  RETURN_IF_ERROR(compute_->Synchronize());
  if (forward_ms) *forward_ms += MillisecondsSince(start);
  if (dloss == 0.0f) return absl::OkStatus();
  start = std::chrono::steady_clock::now();
  for (int s = num_stages - 1; s >= 0; --s) RETURN_IF_ERROR(RunStage(s, true));
  RETURN_IF_ERROR(compute_->Synchronize());
  if (backward_ms) *backward_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

StatusOr<double> Engine::ComputeGradients(const std::vector<MicroBatch>& micro_batches) {
  if (static_cast<int>(micro_batches.size()) > options_.train.grad_accum ||
      micro_batches.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1..", options_.train.grad_accum,
                                                   " micro-batches, got ",
                                                   micro_batches.size()));
  }
  for (size_t u = 0; u < units_.size(); ++u) RETURN_IF_ERROR(components_.reducer->Zero(u));
  const float dloss =
      1.0f / static_cast<float>(tokens_per_micro_batch_ * micro_batches.size());
  last_forward_ms_ = last_backward_ms_ = 0.0;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    RETURN_IF_ERROR(RunMicroBatch(micro_batches[k], static_cast<int>(k), dloss,
                                  &last_forward_ms_, &last_backward_ms_));
  }
  double total = 0.0;
  const float* losses = losses_host_.as<float>();
  for (size_t i = 0; i < micro_batches.size() * tokens_per_micro_batch_; ++i) total += losses[i];
  return total / static_cast<double>(micro_batches.size() * tokens_per_micro_batch_);
}

StatusOr<double> Engine::ClipScale(double* grad_norm) {
  const int num_units = static_cast<int>(units_.size());
  for (int u = 0; u < num_units; ++u) {
    RETURN_IF_ERROR(components_.reducer->SumSquares(u, norms_device_.as<float>() + u));
  }
  RETURN_IF_ERROR(device_->CopyAsync(norms_host_.data(), norms_device_.data(),
                                     num_units * sizeof(float), *compute_));
  RETURN_IF_ERROR(compute_->Synchronize());
  double sum = 0.0;
  for (int u = 0; u < num_units; ++u) sum += norms_host_.as<float>()[u];
  *grad_norm = std::sqrt(sum);
  if (!std::isfinite(*grad_norm)) {
    return absl::DataLossError(absl::StrCat("gradient norm is not finite (", *grad_norm,
                                            "): training diverged; lower train.lr"));
  }
  const double clip = options_.train.grad_clip;
  if (clip > 0.0 && *grad_norm > clip) return clip / (*grad_norm + 1e-6);
  return 1.0;
}

StatusOr<StepResult> Engine::TrainStep(const std::vector<MicroBatch>& micro_batches, float lr,
                                       int step) {
  if (static_cast<int>(micro_batches.size()) != options_.train.grad_accum) {
    return absl::InvalidArgumentError(absl::StrCat("train.grad_accum is ",
                                                   options_.train.grad_accum, " but ",
                                                   micro_batches.size(), " micro-batches came"));
  }
  StepResult result;
  ASSIGN_OR_RETURN(result.loss, ComputeGradients(micro_batches));
  result.forward_ms = last_forward_ms_;
  result.backward_ms = last_backward_ms_;
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(double scale, ClipScale(&result.grad_norm));
  AdamParams params;
  params.lr = lr;
  params.beta1 = options_.train.beta1;
  params.beta2 = options_.train.beta2;
  params.eps = options_.train.eps;
  params.weight_decay = options_.train.weight_decay;
  params.step = step + 1;
  params.grad_scale = static_cast<float>(scale);
  for (size_t u = 0; u < units_.size(); ++u) {
    RETURN_IF_ERROR(components_.stepper->Step(static_cast<int>(u), params));
  }
  RETURN_IF_ERROR(compute_->Synchronize());
  result.optimizer_ms = MillisecondsSince(start);
  return result;
}

StatusOr<double> Engine::EvalLoss(const MicroBatch& batch) {
  RETURN_IF_ERROR(RunMicroBatch(batch, 0, 0.0f, nullptr, nullptr));
  double total = 0.0;
  for (int i = 0; i < tokens_per_micro_batch_; ++i) total += losses_host_.as<float>()[i];
  return total / tokens_per_micro_batch_;
}

StatusOr<std::vector<float>> Engine::ReadMaster(int unit) {
  std::vector<float> values(units_[unit].padded_elements);
  RETURN_IF_ERROR(device_->CopyAsync(values.data(), units_[unit].master.data(),
                                     values.size() * sizeof(float), *compute_));
  RETURN_IF_ERROR(compute_->Synchronize());
  return values;
}

StatusOr<std::vector<float>> Engine::ReadGradients(int unit) {
  std::vector<float> values(units_[unit].padded_elements);
  RETURN_IF_ERROR(device_->CopyAsync(values.data(), units_[unit].grad_accum.data(),
                                     values.size() * sizeof(float), *compute_));
  RETURN_IF_ERROR(compute_->Synchronize());
  return values;
}

Status Engine::WriteMaster(int unit, const std::vector<float>& values) {
  UnitState& state = units_[unit];
  if (values.size() != state.padded_elements) {
    return absl::InvalidArgumentError(absl::StrCat("unit ", unit, " has ", state.padded_elements,
                                                   " elements, got ", values.size()));
  }
  RETURN_IF_ERROR(device_->CopyAsync(state.master.data(), values.data(),
                                     values.size() * sizeof(float), *compute_));
  RETURN_IF_ERROR(ops_->CastFromFloat(*compute_, state.params.data(), state.master.as<float>(),
                                      values.size()));
  return compute_->Synchronize();
}

}  // namespace strata
