// Training session set-up and the per-step loop body; see session.h.
#include "launch/session.h"

#include <chrono>

#include "collectives/local_communicator.h"
#include "models/gpt/gpt.h"
#include "runtime/lr_schedule.h"

namespace strata {

StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::Create(const Options& options,
                                                                   Communicator* communicator) {
  std::unique_ptr<TrainingSession> session(new TrainingSession(options, communicator));
  const int global_rows = options.train.micro_batch * communicator->world_size();
  ASSIGN_OR_RETURN(session->dataset_, LoadTokens(options.data, options.model.vocab));
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
  ASSIGN_OR_RETURN(session->backend_, CreateBackend(options));
  GptConfig config{options.model.layers, options.model.heads, options.model.channels,
                   options.model.vocab, options.model.max_seq_len};
  ASSIGN_OR_RETURN(session->model_, CreateGpt(config, options.train.dtype));
  ASSIGN_OR_RETURN(session->engine_,
                   Engine::Create(options, session->backend_.device.get(),
                                  session->backend_.ops.get(), session->backend_.host_ops.get(),
                                  session->model_.get(),
                                  communicator));
  return session;
}

StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::CreateSingleRank(
    const Options& options) {
  if (options.zero.world != 1) {
    return absl::InvalidArgumentError("a single-rank session needs zero.world=1");
  }
  ASSIGN_OR_RETURN(auto group, CreateLocalGroup(1, LocalGroupOptions{}));
  std::unique_ptr<Communicator> communicator = std::move(group[0]);
  ASSIGN_OR_RETURN(auto session, Create(options, communicator.get()));
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
  ASSIGN_OR_RETURN(report.result, engine_->TrainStep(micro_batches, report.lr, step));
  report.ms_per_step =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report.tokens_per_s = tokens_per_step() / (report.ms_per_step / 1000.0);
  const int every = options_.train.eval_every;
  if (every > 0 && val_sampler_ && ((step + 1) % every == 0 || step + 1 == options_.train.steps)) {
    ASSIGN_OR_RETURN(report.val_loss, Validate());
  }
  report.device = backend_.device->pool(Tier::kDevice).Stats();
  report.host = backend_.device->pool(Tier::kHost).Stats();
  return report;
}

StatusOr<double> TrainingSession::Validate() {
  if (!val_sampler_) return absl::FailedPreconditionError("no validation split (data.val_fraction)");
  const int64_t batches = std::min<int64_t>(options_.train.eval_batches,
                                            val_sampler_->batches_to_cover());
  double total = 0.0;
  for (int64_t k = 0; k < batches; ++k) {
    ASSIGN_OR_RETURN(Batch batch, RankRows(*val_sampler_, 0, k));
    ASSIGN_OR_RETURN(double loss, engine_->EvalLoss({batch.inputs.data(), batch.targets.data()}));
    total += loss;
  }
  return total / static_cast<double>(batches);
}

}  // namespace strata
