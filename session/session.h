// A training session: everything `strata train` and `strata bench train` set up from
// Options — backend (device + kernels), data splits and samplers, the GPT model and the
// engine — and one call per optimizer step. Keeps the two commands on one code path.
//
// Communicators: the one passed to Create (local threads or MPI, from RunRanks) carries
// host buffers. On device.backend=cpu the engine uses it directly. On device.backend=cuda
// the engine's collectives run on device buffers, so the session creates a device
// communicator and hands it to the engine: with one rank the self communicator (a copy per
// collective; NCCL is never loaded), with more an NCCL communicator with the given one as
// the bootstrap (rank 0's ncclUniqueId goes through it; every rank of it must create its
// session together). NCCL needs one GPU per rank on a node; more ranks than GPUs is
// refused before NCCL is set up.
// Destruction order (members, reverse): batches, engine, model, samplers, device
// communicator, data, backend (Ops, then the Device), owned bootstrap communicator: every
// user of the Device goes before it, and the engine before the communicator it uses.
// Thread-safety: one host thread drives a session.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "core/trace.h"
#include "data/batch_sampler.h"
#include "data/tokens.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "session/faults.h"

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
  // Payload bytes this rank sent to ranks on its node and on other nodes in the step's
  // collectives (training step and validation; not the checkpoint), where the engine's
  // communicator counts them (MPI: NodeTraffic, docs/multinode.md).
  std::optional<TrafficBytes> comm_bytes;
  // A checkpoint completed (its manifest written) after this step, and the step it goes
  // on from. Synchronous (train.checkpoint_async=false): the one of this step. Background:
  // one started after an earlier step, completed here once every rank's file was durable
  // (or because a new one is due, or this is the last step).
  std::optional<std::string> checkpoint;
  int checkpoint_step = 0;
  // Where a background checkpoint was completed at this step and then this step's own
  // checkpoint written synchronously (the last step's): the earlier one's path.
  std::optional<std::string> checkpoint_completed_before;
  // A background checkpoint was started after this step (its snapshot taken): its next step.
  int checkpoint_started = 0;
  // What this step's checkpoints held training up (not in ms_per_step): a synchronous
  // checkpoint's whole writing; in the background the snapshot (with its waits for the
  // writer, checkpoint_wait_ms) and the completion (waiting for the writer, the manifest).
  double checkpoint_ms = 0.0;
  double checkpoint_wait_ms = 0.0;
  // The background snapshot's most bytes of host buffers held at once.
  uint64_t checkpoint_buffer_peak_bytes = 0;
};

// --trace FILE under several ranks: rank k writes FILE.rank<k>.json ("t.json" ->
// "t.rank1.json"; other names get ".rank<k>" appended); one rank writes FILE itself.
std::string TracePathOfRank(const std::string& path, int rank, int world_size);

class TrainingSession {
 public:
  // Builds everything for the rank `communicator` stands for (it must outlive the
  // session); errors name what failed (data file, memory tier, ...). Rank r trains on rows
  // [r*B, (r+1)*B) of each global micro-batch of B*world rows.
  // With `trace`, the session keeps a timeline trace (core/trace.h) of the steps
  // train.trace_steps names (the device's streams, NVMe slots, CPU Adam, a span per step on
  // the track "steps"); WriteTrace writes it.
  // `faults`: what the fault suite injects (session/faults.h); none by default.
  static StatusOr<std::unique_ptr<TrainingSession>> Create(const Options& options,
                                                           Communicator* communicator,
                                                           bool trace = false,
                                                           const RunFaults& faults = {});
  // One rank on its own (a local group of one, owned by the session).
  static StatusOr<std::unique_ptr<TrainingSession>> CreateSingleRank(const Options& options,
                                                                     bool trace = false);

  // The first step to run: 0, or the step a train.resume checkpoint goes on from (loaded
  // by Create).
  int first_step() const { return first_step_; }
  // The checkpoint loaded (a step-<k> directory), or "".
  const std::string& resumed_from() const { return resumed_from_; }
  // Runs optimizer step `step` (0-based); evaluates when train.eval_every says so, writes
  // a checkpoint when train.checkpoint_every says so (collective).
  StatusOr<StepReport> Step(int step);
  // Writes a checkpoint of the state before step `next_step` (every step before it has
  // run) to train.checkpoint_dir; returns its path (collective).
  // A background checkpoint still being written is completed first (if it is the one of
  // `next_step`, it is the one returned).
  StatusOr<std::string> Checkpoint(int next_step);
  // The background checkpoint being written (train.checkpoint_async), completed: waits for
  // every rank's file, writes the manifest (collective). Its path and step; none pending:
  // nullopt.
  struct CompletedCheckpoint {
    std::string path;
    int step = 0;
  };
  StatusOr<std::optional<CompletedCheckpoint>> FinishPendingCheckpoint();
  // Mean validation loss over train.eval_batches micro-batches.
  StatusOr<double> Validate();
  // The end of training: pending work (a background checkpoint, a delayed update, copies in
  // flight) done, and its first error, if any, returned.
  Status Finish();
  // The trace so far as Chrome trace-event JSON at `path` (FailedPrecondition without one).
  Status WriteTrace(const std::string& path) const;
  // Puts this rank's trace on rank 0's timeline: the ranks measure their clocks' offsets
  // over `control` (collectives/clock_sync.h). Collective: every rank calls it after
  // Create when tracing (without a trace it does nothing, on every rank alike).
  Status AlignTraceClock(Communicator& control);
  const Trace* trace() const { return trace_.get(); }

  const Options& options() const { return options_; }
  // The communicator the engine's collectives use: the device one on CUDA, else the one
  // given to Create.
  Communicator& engine_communicator() {
    return device_communicator_ ? *device_communicator_ : *communicator_;
  }
  const Model& model() const { return *model_; }
  Device& device() { return *backend_.device; }
  const TokenDataset& dataset() const { return dataset_; }
  size_t num_params() const;
  int64_t tokens_per_step() const;

 private:
  TrainingSession(const Options& options, Communicator* communicator)
      : options_(options), communicator_(communicator) {}
  StatusOr<Batch> RankRows(const BatchSampler& sampler, int64_t step, int64_t micro) const;
  // With an NCCL communicator: a failed step aborts it, so the other ranks' collectives
  // fail promptly instead of waiting for zero.comm_timeout_s (RunRanks aborts only the
  // bootstrap communicator). Returns `status`.
  Status AbortOnError(const Status& status);
  // What this rank sent within and across nodes so far, over the engine's communicators
  // (with hybrid sharding also its node and rail ones); none where they do not count it.
  std::optional<TrafficBytes> SentBytes();

  Options options_;
  RunFaults faults_;
  Communicator* communicator_;
  std::unique_ptr<Communicator> owned_communicator_;  // CreateSingleRank only
  // Before backend_: the device's streams record into it until they are gone.
  std::unique_ptr<Trace> trace_;
  std::pair<int, int> trace_steps_{0, -1};  // 0-based, inclusive
  Backend backend_;  // before every member that uses the Device or the Ops
  TokenDataset dataset_;
  // device.backend=cuda: the NCCL communicator over communicator_ (after backend_: it
  // needs the Device to outlive it; before engine_: the engine issues collectives on it).
  std::unique_ptr<Communicator> device_communicator_;
  // zero.shard_group=node: the rank's node and rail communicators (collectives/
  // communicator.h NodeGroups), made from the engine's; before engine_, which uses them.
  NodeGroups node_groups_;
  std::optional<BatchSampler> train_sampler_;
  std::optional<BatchSampler> val_sampler_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  std::vector<Batch> batches_;  // grad_accum micro-batches of the current step
  int first_step_ = 0;
  std::string resumed_from_;
  // A LoRA run's base as its checkpoints refer to it (set where checkpoints are written or
  // read).
  std::optional<LoraBase> lora_base_;
  CheckpointContext CheckpointContextOf() const;
  // The background checkpoints' buffers, kept between them (before pending_checkpoint_:
  // it outlives the writer).
  std::unique_ptr<CheckpointBufferPool> checkpoint_buffers_;
  // The background checkpoint being written (after engine_: destroyed first).
  std::unique_ptr<BackgroundCheckpoint> pending_checkpoint_;
};

}  // namespace strata
