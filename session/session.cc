// Training session set-up and the per-step loop body; see session.h.
#include "session/session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "collectives/agreement.h"
#include "collectives/clock_sync.h"
#include "collectives/local_communicator.h"
#include "collectives/nccl_communicator.h"
#include "collectives/self_communicator.h"
#include "config/options_parse.h"
#include "device/cuda/cuda_device.h"
#include "data/tokenizer/training_data.h"
#include "interop/import_weights.h"
#include "interop/llmc_model.h"
#include "models/create_model.h"
#include "runtime/lr_schedule.h"

namespace strata {
namespace {

// The device communicator of this rank over `bootstrap`: NCCL, or with one rank the self
// communicator (no NCCL at all); see session.h.
StatusOr<std::unique_ptr<Communicator>> CreateDeviceCommunicator(const Options& options,
                                                                 Device& device,
                                                                 Communicator& bootstrap) {
  if (bootstrap.world_size() == 1) return CreateSelfCommunicator(device);
  const int ranks_here = bootstrap.local_size();
  ASSIGN_OR_RETURN(int gpus, CudaDeviceCount());
  if (ranks_here > gpus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device.backend=cuda: ", ranks_here, " ranks on this node but ", gpus,
        " GPU(s): NCCL needs one GPU per rank; use at most ", gpus,
        " ranks per node (zero.world or mpirun -np)"));
  }
  NcclOptions nccl;
  nccl.timeout_s = options.zero.comm_timeout_s;
  nccl.fixed_order = true;  // bit-identical sums to the local and MPI communicators
  StatusOr<std::unique_ptr<Communicator>> communicator =
      CreateNcclCommunicator(device, bootstrap, nccl);
  if (!communicator.ok()) {
    return Annotate(communicator.status(),
                    absl::StrCat("device.backend=cuda: setting up NCCL for ",
                                 bootstrap.Describe()));
  }
  return communicator;
}

}  // namespace

StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::Create(const Options& options,
                                                                   Communicator* communicator,
                                                                   bool trace,
                                                                   const RunFaults& faults) {
  std::unique_ptr<TrainingSession> session(new TrainingSession(options, communicator));
  session->faults_ = faults;
  if (trace) {
    ASSIGN_OR_RETURN(const auto steps, ParseStepRange(options.train.trace_steps));
    session->trace_steps_ = {steps.first - 1, steps.second - 1};
    session->trace_ = std::make_unique<Trace>(TraceOptions{
        .rank = communicator->rank(),
        .clock_skew_ns = faults.trace_clock_skew_ms * communicator->rank() * 1'000'000});
  }
  // The backend first: a missing GPU (or CUDA build) fails before any data is read. Each
  // rank picks its GPU by its place on its node, as the communicator knows it (threads:
  // their rank; MPI: MPI_Comm_split_type, whatever started the processes).
  ASSIGN_OR_RETURN(session->backend_, CreateBackend(options, communicator->local_rank(),
                                                    communicator->local_size()));
  // Before the engine: its NVMe engines take the trace when they are made.
  if (session->trace_) session->backend_.device->SetTrace(session->trace_.get());
  const int global_rows = options.train.micro_batch * communicator->world_size();
  std::string data_description;
  ASSIGN_OR_RETURN(session->dataset_, LoadTrainingTokens(options, &data_description));
  session->dataset_.description += "; " + data_description;
  ASSIGN_OR_RETURN(TokenSplits splits, SplitTokens(session->dataset_, options.data.val_fraction,
                                                   options.train.seq_len));
  ASSIGN_OR_RETURN(BatchSampler train,
                   BatchSampler::ForTraining(splits, global_rows, options.train.seq_len,
                                             options.train.seed));
  session->train_sampler_.emplace(std::move(train));
  if (splits.validation.num_tokens() > 0) {
    ASSIGN_OR_RETURN(BatchSampler val,
                     BatchSampler::ForValidation(splits, global_rows, options.train.seq_len));
    session->val_sampler_.emplace(std::move(val));
  }
  if (options.device.backend == BackendKind::kCuda) {
    ASSIGN_OR_RETURN(session->device_communicator_,
                     CreateDeviceCommunicator(options, *session->backend_.device, *communicator));
  }
  ASSIGN_OR_RETURN(session->model_,
                   CreateModel(options.model, options.train.recompute, options.train.dtype,
                               options.lora));
  // Resuming or importing writes every unit's state: the model's random init would be
  // wasted. A LoRA run's checkpoints hold only the adapters: its base is imported (or
  // initialised) even when it resumes, and its adapters start from the model's init.
  const bool lora = options.lora.enabled();
  const bool import = (options.train.resume.empty() || lora) && !options.model.from.empty();
  ASSIGN_OR_RETURN(EngineConfig config,
                   EngineConfig::From(options, session->engine_communicator().world_size()));
  config.nvme.fault = faults.nvme;
  Engine::ShardGroups groups;
  if (options.zero.shard_group == ShardGroup::kNode) {
    const NodeTraffic* nodes = session->engine_communicator().node_traffic();
    if (nodes == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "zero.shard_group=node needs a communicator that knows the nodes (MPI: mpirun on "
          "the cpu backend); this run's is ", session->engine_communicator().Describe(),
          ": set zero.shard_group=world"));
    }
    ASSIGN_OR_RETURN(session->node_groups_, nodes->SplitByNode());
    groups.shards = session->node_groups_.node.get();
    groups.replicas = session->node_groups_.rail.get();
  }
  ASSIGN_OR_RETURN(session->engine_,
                   Engine::Create(config, session->backend_.device.get(),
                                  session->backend_.ops.get(), session->backend_.host_ops.get(),
                                  session->model_.get(), &session->engine_communicator(),
                                  (options.train.resume.empty() || lora) && !import
                                      ? Engine::InitialState::kModelInit
                                      : Engine::InitialState::kLoadedLater,
                                  groups));
  if (import) {
    // model.from is "hf:DIR" or "llmc:FILE" (the parser accepts nothing else).
    const std::string& from = options.model.from;
    const bool show = communicator->rank() == 0;
    Status imported =
        absl::StartsWith(from, "hf:")
            ? ImportHfWeights(from.substr(3), options.model, *session->model_,
                              *session->engine_, show)
            : ImportLlmcWeights(from.substr(5), options.model, *session->model_,
                                *session->engine_, show);
    if (!imported.ok()) return session->AbortOnError(imported);
    if (lora) {  // the adapters, from the model's init
      const Model& model = *session->model_;
      std::vector<float> values;
      for (int u = 0; u < static_cast<int>(model.units().size()); ++u) {
        if (!model.units()[u].trainable()) continue;
        values.assign(session->engine_->state().PaddedElements(u), 0.0f);
        model.InitUnit(u, options.train.seed, values.data());
        Status written = session->engine_->state().WriteMaster(u, values);
        if (!written.ok()) return session->AbortOnError(written);
      }
    }
  }
  // A LoRA run's checkpoints refer to its base by the hash of its params (one pass over
  // them, only where checkpoints are written or read).
  if (lora && (options.train.checkpoint_every > 0 || !options.train.resume.empty())) {
    StatusOr<std::string> hash = BaseHash(*session->engine_, *session->model_);
    if (!hash.ok()) return session->AbortOnError(hash.status());
    session->lora_base_ =
        LoraBase{options.model.from, options.train.seed, options.train.dtype,
                 options.lora.base_dtype, *hash};
  }
  if (!options.train.resume.empty()) {
    StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(
        *session->engine_, *session->model_, options, options.train.resume,
        communicator->rank() == 0, lora ? &*session->lora_base_ : nullptr, communicator);
    if (!loaded.ok()) return session->AbortOnError(loaded.status());
    session->first_step_ = loaded->next_step;
    session->resumed_from_ = loaded->path;
  }
  return session;
}

StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::CreateSingleRank(
    const Options& options, bool trace) {
  if (options.zero.world != 1) {
    return absl::InvalidArgumentError("a single-rank session needs zero.world=1");
  }
  ASSIGN_OR_RETURN(auto group, CreateLocalGroup(1, LocalGroupOptions{}));
  std::unique_ptr<Communicator> communicator = std::move(group[0]);
  ASSIGN_OR_RETURN(auto session, Create(options, communicator.get(), trace));
  session->owned_communicator_ = std::move(communicator);
  return session;
}

size_t TrainingSession::num_params() const {
  size_t total = 0;
  for (const UnitLayout& unit : model_->units()) total += unit.num_params();
  return total;
}

int64_t TrainingSession::tokens_per_step() const {
  return static_cast<int64_t>(options_.train.micro_batch) * options_.train.seq_len *
         options_.train.grad_accum * communicator_->world_size();
}

StatusOr<Batch> TrainingSession::RankRows(const BatchSampler& sampler, int64_t step,
                                          int64_t micro) const {
  const int rows = options_.train.micro_batch;
  const int rank = communicator_->rank();
  return sampler.SampleRows(step, micro, rank * rows, (rank + 1) * rows);
}

StatusOr<StepReport> TrainingSession::Step(int step) {
  auto start = std::chrono::steady_clock::now();
  StepReport report;
  report.step = step;
  batches_.clear();
  std::vector<MicroBatch> micro_batches;
  for (int k = 0; k < options_.train.grad_accum; ++k) {
    ASSIGN_OR_RETURN(Batch batch, RankRows(*train_sampler_, step, k));
    batches_.push_back(std::move(batch));
  }
  for (const Batch& batch : batches_) {
    micro_batches.push_back({batch.inputs.data(), batch.targets.data()});
  }
  report.lr = LearningRate(options_.train, step);
  const bool traced = trace_ != nullptr && step >= trace_steps_.first && step <= trace_steps_.second;
  const std::optional<TrafficBytes> sent_before = SentBytes();
  const auto engine_start = std::chrono::steady_clock::now();
  if (traced) {
    trace_->SetRecording(true);
    // Each tier's bytes from the step's start (the pools add a value at every change).
    for (const Tier tier : {Tier::kDevice, Tier::kHost}) {
      trace_->Counter(absl::StrCat(TierName(tier), " tier bytes"), engine_start,
                      static_cast<double>(backend_.device->pool(tier).Stats().current_bytes));
    }
  }
  StatusOr<StepResult> result = engine_->TrainStep(micro_batches, report.lr, step);
  if (traced) {
    const int track = trace_->Track("steps");
    trace_->Span(track, absl::StrCat("step ", step + 1), "step", engine_start,
                 std::chrono::steady_clock::now(),
                 {{"loss", result.ok() ? absl::StrCat(result->loss) : "failed"},
                  {"compute_stall_ms",
                   result.ok() ? absl::StrCat(result->compute_stall_ms) : "failed"}});
    trace_->SetRecording(false);
  }
  if (!result.ok()) return AbortOnError(result.status());
  report.result = *result;
  report.ms_per_step =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report.tokens_per_s = tokens_per_step() / (report.ms_per_step / 1000.0);
  const int every = options_.train.eval_every;
  if (every > 0 && val_sampler_ && ((step + 1) % every == 0 || step + 1 == options_.train.steps)) {
    ASSIGN_OR_RETURN(report.val_loss, Validate());
  }
  if (const std::optional<TrafficBytes> sent = SentBytes(); sent && sent_before) {
    report.comm_bytes = TrafficBytes{sent->within_node - sent_before->within_node,
                                     sent->across_nodes - sent_before->across_nodes};
  }
  const int checkpoint_every = options_.train.checkpoint_every;
  const bool last = step + 1 == options_.train.steps;
  const bool due = checkpoint_every > 0 && ((step + 1) % checkpoint_every == 0 || last);
  const auto since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  if (pending_checkpoint_) {
    // Completed once every rank's file is durable (the ranks agree: a collective per step
    // while one is pending), at the latest when the next is due or training ends.
    bool complete = due || last;
    if (!complete && communicator_->world_size() == 1) {
      complete = pending_checkpoint_->written();
    } else if (!complete) {
      // Nothing of the engine in flight on the communicator before this agreement (its
      // collectives are ordered on one stream; a delayed update is put in place first).
      if (Status synced = engine_->state().Sync(); !synced.ok()) return AbortOnError(synced);
      ASSIGN_OR_RETURN(const std::vector<std::string> written,
                       GatherTexts(*communicator_, pending_checkpoint_->written() ? "1" : "0"));
      complete = std::count(written.begin(), written.end(), "1") ==
                 static_cast<std::ptrdiff_t>(written.size());
    }
    if (complete) {
      const auto completion_start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(const std::optional<CompletedCheckpoint> completed,
                       FinishPendingCheckpoint());
      report.checkpoint = completed->path;
      report.checkpoint_step = completed->step;
      report.checkpoint_ms += since(completion_start);
    }
  }
  if (due) {
    const auto checkpoint_start = std::chrono::steady_clock::now();
    if (options_.train.checkpoint_async && !last) {
      if (!checkpoint_buffers_) {
        checkpoint_buffers_ =
            std::make_unique<CheckpointBufferPool>(options_.train.checkpoint_buffer_bytes);
      }
      StatusOr<std::unique_ptr<BackgroundCheckpoint>> started = BackgroundCheckpoint::Start(
          *engine_, *model_, options_, step + 1, CheckpointContextOf(), checkpoint_buffers_.get());
      if (!started.ok()) return AbortOnError(started.status());
      pending_checkpoint_ = std::move(started).value();
      report.checkpoint_started = step + 1;
      report.checkpoint_wait_ms = pending_checkpoint_->snapshot_wait_ms();
      report.checkpoint_buffer_peak_bytes = pending_checkpoint_->peak_buffer_bytes();
    } else {
      // A background one completed just now is followed by this step's: both are reported.
      if (report.checkpoint) report.checkpoint_completed_before = *report.checkpoint;
      ASSIGN_OR_RETURN(report.checkpoint, Checkpoint(step + 1));
      report.checkpoint_step = step + 1;
    }
    report.checkpoint_ms += since(checkpoint_start);
  }
  report.device = backend_.device->pool(Tier::kDevice).Stats();
  report.host = backend_.device->pool(Tier::kHost).Stats();
  return report;
}

CheckpointContext TrainingSession::CheckpointContextOf() const {
  CheckpointContext context;
  context.communicator = communicator_;
  context.base = lora_base_ ? &*lora_base_ : nullptr;
  context.tokenizer = TrainingTokenizer(options_);
  context.fault = faults_.checkpoint ? &*faults_.checkpoint : nullptr;
  return context;
}

StatusOr<std::string> TrainingSession::Checkpoint(int next_step) {
  ASSIGN_OR_RETURN(const std::optional<CompletedCheckpoint> completed, FinishPendingCheckpoint());
  if (completed && completed->step == next_step) return completed->path;
  StatusOr<std::string> path =
      SaveCheckpoint(*engine_, *model_, options_, next_step, CheckpointContextOf());
  if (!path.ok()) return AbortOnError(path.status());
  return path;
}

StatusOr<std::optional<TrainingSession::CompletedCheckpoint>>
TrainingSession::FinishPendingCheckpoint() {
  if (!pending_checkpoint_) return std::optional<CompletedCheckpoint>();
  std::unique_ptr<BackgroundCheckpoint> pending = std::move(pending_checkpoint_);
  StatusOr<std::string> path = pending->Finish();
  if (!path.ok()) return AbortOnError(path.status());
  return std::optional<CompletedCheckpoint>(CompletedCheckpoint{*path, pending->next_step()});
}

Status TrainingSession::AlignTraceClock(Communicator& control) {
  if (trace_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::vector<int64_t> offsets,
                   MeasureClockOffsets(control, [this] { return trace_->Now(); }));
  trace_->SetClockOffset(offsets[control.rank()]);
  return absl::OkStatus();
}

Status TrainingSession::WriteTrace(const std::string& path) const {
  if (trace_ == nullptr) return absl::FailedPreconditionError("this session keeps no trace");
  return trace_->Write(path);
}

Status TrainingSession::Finish() {
  RETURN_IF_ERROR(FinishPendingCheckpoint().status());
  Status status = engine_->Finish();
  if (!status.ok()) return AbortOnError(status);
  return status;
}

StatusOr<double> TrainingSession::Validate() {
  if (!val_sampler_) return absl::FailedPreconditionError("no validation split (data.val_fraction)");
  const int64_t batches = std::min<int64_t>(options_.train.eval_batches,
                                            val_sampler_->batches_to_cover());
  double total = 0.0;
  for (int64_t k = 0; k < batches; ++k) {
    ASSIGN_OR_RETURN(Batch batch, RankRows(*val_sampler_, 0, k));
    StatusOr<double> loss = engine_->EvalLoss({batch.inputs.data(), batch.targets.data()});
    if (!loss.ok()) return AbortOnError(loss.status());
    total += *loss;
  }
  return total / static_cast<double>(batches);
}

Status TrainingSession::AbortOnError(const Status& status) {
  if (status.ok()) return status;
  for (Communicator* communicator : {device_communicator_.get(), node_groups_.node.get(),
                                     node_groups_.rail.get()}) {
    if (communicator != nullptr) communicator->Abort(std::string(status.message()));
  }
  return status;
}

std::optional<TrafficBytes> TrainingSession::SentBytes() {
  const NodeTraffic* world = engine_communicator().node_traffic();
  if (world == nullptr) return std::nullopt;
  TrafficBytes total = world->sent();
  for (Communicator* group : {node_groups_.node.get(), node_groups_.rail.get()}) {
    if (group == nullptr || group->node_traffic() == nullptr) continue;
    const TrafficBytes sent = group->node_traffic()->sent();
    total.within_node += sent.within_node;
    total.across_nodes += sent.across_nodes;
  }
  return total;
}

std::string TracePathOfRank(const std::string& path, int rank, int world_size) {
  if (world_size <= 1) return path;
  const std::string suffix = absl::StrCat(".rank", rank);
  if (absl::EndsWith(path, ".json")) {
    return absl::StrCat(path.substr(0, path.size() - 5), suffix, ".json");
  }
  return path + suffix;
}

}  // namespace strata
