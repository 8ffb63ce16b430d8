// A training session: everything `strata train` and `strata bench train` set up from
// Options — backend (device + kernels), data splits and samplers, the GPT model and the
// engine — and one call per optimizer step. Keeps the two commands on one code path.
// Thread-safety: one host thread drives a session.
#pragma once

#include <memory>
#include <optional>

#include "collectives/communicator.h"
#include "data/batch_sampler.h"
#include "data/tokens.h"
#include "runtime/backend.h"
#include "runtime/core/options.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

struct StepReport {
  int step = 0;  // 0-based
  StepResult result;
  float lr = 0.0f;
  double ms_per_step = 0.0;
  double tokens_per_s = 0.0;
  PoolStats device;  // peaks so far
  PoolStats host;
  std::optional<double> val_loss;
};

class TrainingSession {
 public:
  // Builds everything for the rank `communicator` stands for (it must outlive the
  // session); errors name what failed (data file, memory tier, ...). Rank r trains on rows
  // [r*B, (r+1)*B) of each global micro-batch of B*world rows.
  static StatusOr<std::unique_ptr<TrainingSession>> Create(const Options& options,
                                                           Communicator* communicator);
  // One rank on its own (a local group of one, owned by the session).
  static StatusOr<std::unique_ptr<TrainingSession>> CreateSingleRank(const Options& options);

  // Runs optimizer step `step` (0-based); evaluates when train.eval_every says so.
  StatusOr<StepReport> Step(int step);
  // Mean validation loss over train.eval_batches micro-batches.
  StatusOr<double> Validate();

  const Options& options() const { return options_; }
  const Model& model() const { return *model_; }
  Device& device() { return *backend_.device; }
  const TokenDataset& dataset() const { return dataset_; }
  size_t num_params() const;
  int64_t tokens_per_step() const;

 private:
  TrainingSession(const Options& options, Communicator* communicator)
      : options_(options), communicator_(communicator) {}
  StatusOr<Batch> RankRows(const BatchSampler& sampler, int64_t step, int64_t micro) const;

  Options options_;
  Communicator* communicator_;
  std::unique_ptr<Communicator> owned_communicator_;  // CreateSingleRank only
  Backend backend_;
  TokenDataset dataset_;
  std::optional<BatchSampler> train_sampler_;
  std::optional<BatchSampler> val_sampler_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  std::vector<Batch> batches_;  // grad_accum micro-batches of the current step
};

}  // namespace strata
