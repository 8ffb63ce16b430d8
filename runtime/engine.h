// Engine: trains a Model on a Device with the ZeRO components chosen by the options.
// One training step = for each micro-batch: forward over the model's stages in order,
// backward in reverse, each stage's units acquired before and released after, and each
// unit's gradients handed to the reducer as soon as its last backward use is done; then
// the global gradient norm, clipping, and one optimizer sub-step per unit.
// Thread-safety: not thread-safe; one host thread drives an engine. Device, Ops and Model
// must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "kernels/ops.h"
#include "core/device.h"
#include "core/options.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/zero_components.h"

namespace strata {

// One micro-batch of token ids, host memory, [B,T] each.
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
};

struct StepResult {
  double loss = 0.0;       // mean over every token of every micro-batch
  // Global L2 norm before clipping. zero.param_update=delayed: the norm of the update this
  // step enqueued (the previous step's gradient; 0 if none), as it is reduced during the
  // next step's forward.
  double grad_norm = 0.0;
  double forward_ms = 0.0;
  double backward_ms = 0.0;
  // The optimizer's AdamW sub-steps: how long they ran (the standalone optimizer time), and
  // how long the step end waited for them after the backward compute was done (not hidden
  // behind backward; includes the gradients' last copies and the grad-norm reduction the
  // step needs in any case; delayed updates: the previous step's AdamW still running).
  double optimizer_ms = 0.0;
  double optimizer_exposed_ms = 0.0;
  GatherStats gather;      // stage 3: all-gathers, plan deviations, compute waits
  double compute_stall_ms = 0.0;  // compute stream blocked on other streams (collectives)
  // Forward + backward time in which the compute stream ran nothing (blocked on other
  // streams, or starved because its work could not be enqueued yet); 0 where the backend
  // cannot observe it (CUDA).
  double compute_idle_ms = 0.0;
  // NVMe tier traffic since the previous step ended (so reads ahead submitted between
  // steps count too; state read-outs and loads do not).
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_written_bytes = 0;
  // Units whose optimizer sub-step was split this step: the elements final before the
  // unit's last backward stage stepped during the rest of backward, the rest after it
  // (a tied embedding on one rank with the optimizer and grads on the host, no clipping).
  int split_units = 0;
  // Time the optimizer state's NVMe tier had requests at the disk during the step, and
  // the param shards' tier (zero.param_tier=nvme), in ms.
  double nvme_busy_ms = 0.0;
  double param_nvme_busy_ms = 0.0;
};

// One access of the trace: stage `stage` uses unit `unit` in the forward or backward.
struct UnitAccess {
  int stage;
  int unit;
  bool backward;
};

class Engine {
 public:
  // `ops` are the backend's kernels (device-tier memory), `host_ops` CPU kernels on host
  // memory (the offloaded optimizer). `communicator` joins this rank to the others (world
  // size 1: a local group of one). All must outlive the engine.
  static StatusOr<std::unique_ptr<Engine>> Create(const Options& options, Device* device,
                                                  Ops* ops, Ops* host_ops, Model* model,
                                                  Communicator* communicator);
  ~Engine();

  // Runs grad_accum micro-batches (micro_batches.size() must equal train.grad_accum),
  // then the optimizer with learning rate `lr`; `step` is 0-based. With
  // zero.param_update=delayed nothing waits for the optimizer: this step's norm is reduced
  // and its AdamW enqueued (and run) during the next call, whose micro-batches still see
  // the params before it.
  StatusOr<StepResult> TrainStep(const std::vector<MicroBatch>& micro_batches, float lr,
                                 int step);
  // Forward and backward only: gradients summed into the fp32 gradient state, no step.
  // Returns the mean loss. The gradient state is zeroed first.
  StatusOr<double> ComputeGradients(const std::vector<MicroBatch>& micro_batches);
  // Mean loss of one micro-batch, no backward.
  StatusOr<double> EvalLoss(const MicroBatch& batch);
  // Puts a pending (delayed) update in place and waits for every stream and write-back;
  // the first error of any of them.
  Status Finish() { return SyncStreams(); }

  // fp32 views of one unit for tests and checkpoints (full unit, padded length). With a
  // sharded optimizer these gather the shards: every rank must call them together.
  StatusOr<std::vector<float>> ReadMaster(int unit);
  StatusOr<std::vector<float>> ReadGradients(int unit);
  // The unit's master weights and Adam moments (for checkpoints).
  struct UnitOptimizerState {
    std::vector<float> master, exp_avg, exp_avg_sq;
  };
  StatusOr<UnitOptimizerState> ReadOptimizerState(int unit);
  // The length of those full-unit views (the unit padded to the world size).
  size_t PaddedElements(int unit) const { return units_[unit].padded_elements; }
  // Sets master weights (and the compute-dtype params) of one unit from its full values,
  // with zeroed Adam moments; each rank keeps the part it owns.
  Status WriteMaster(int unit, const std::vector<float>& values);
  // The same with the Adam moments given (full unit each).
  Status WriteOptimizerState(int unit, const UnitOptimizerState& state);

  // The unit access trace of one micro-batch (forward then backward).
  const std::vector<UnitAccess>& trace() const { return trace_; }
  Stream& compute_stream() { return *compute_; }

 private:
  Engine(const Options& options, Device* device, Ops* ops, Ops* host_ops, Model* model,
         Communicator* communicator);
  // ComputeGradients; with `early` set, each unit's optimizer sub-step is enqueued on the
  // last micro-batch as soon as its gradient sum is final (units stepped: stepped_).
  StatusOr<double> RunGradients(const std::vector<MicroBatch>& micro_batches,
                                const AdamParams* early);
  Status Init();
  Status RunMicroBatch(const MicroBatch& batch, int index, float dloss, double* forward_ms,
                       double* backward_ms);
  Status RunStage(int stage, bool backward, int* access);
  StatusOr<double> ClipScale(double* grad_norm);
  // ClipScale in two halves: the norm parts reduced over ranks into norms_host_ (recorded
  // by norms_ready_), and the global norm and clip scale from them (blocking).
  Status EnqueueNorms();
  StatusOr<double> ScaleFromNorms(double* grad_norm);
  // zero.param_update=delayed: the pending step's AdamW (its norm read, its scale set),
  // staged for release after each unit's next last use.
  Status StepPending();
  // Enqueues the sum of squares of the unit's owned gradient into norms_device_ (of a
  // split unit: its late ranges; EarlyNormPart: the rest, once landed early).
  Status NormPart(int unit);
  Status EarlyNormPart(int unit);
  // Mean of the per-rank means of this rank's losses_host_ over `micro_batches`.
  StatusOr<double> GlobalMeanLoss(int micro_batches);
  // The full unit from this rank's part of it (all ranks call together when sharded).
  StatusOr<std::vector<float>> ReadFull(int unit, std::vector<float> own_part);
  // Elements of the unit's optimizer-side state on this rank (shard or full unit).
  size_t StateElements(int unit) const;
  Status SyncStreams();
  // zero.param_update=delayed: enqueues a pending AdamW and releases the staged params of
  // every unit not yet released (before an evaluation, a read-out, the end).
  Status PublishStaged();

  Options options_;
  Placement placement_;  // resolved once in Init
  Device* device_;
  Ops* ops_;
  Ops* host_ops_;
  Model* model_;
  Communicator* communicator_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> comm_;
  std::unique_ptr<Stream> copy_;
  std::unique_ptr<Stream> host_;
  bool last_micro_batch_ = false;      // the running micro-batch completes the sums
  const AdamParams* early_ = nullptr;  // set while a step's last micro-batch runs
  std::vector<bool> stepped_;          // units whose sub-step was enqueued early
  std::vector<bool> normed_;           // units whose norm part was enqueued early
  // zero.param_update=delayed: units whose last update is staged on the host, released
  // after the unit's last backward use in the next step.
  bool delayed_ = false;
  std::vector<bool> staged_;
  bool pending_ = false;        // a step whose norm is being reduced; AdamW not enqueued
  AdamParams pending_params_;   // its hyper-parameters
  double applied_norm_ = 0.0;   // norm of the update StepPending enqueued last
  std::unique_ptr<Event> norms_ready_;  // norms_host_ filled (comm stream)
  std::unique_ptr<Event> norms_join_;
  std::vector<UnitState> units_;
  // The NVMe tiers' totals when the last step ended (or the set-up, or a state read-out
  // or load): a step reports what moved since.
  struct NvmeCounts {
    uint64_t read = 0, written = 0;
    double busy_ms = 0.0, param_busy_ms = 0.0;
  };
  NvmeCounts NvmeCountsNow() const;
  NvmeCounts nvme_counted_;
  // WriteOptimizerState's work.
  Status StoreUnitState(int unit, const UnitOptimizerState& full_state);
  ZeroComponents components_;
  std::vector<UnitAccess> trace_;
  std::vector<int> last_backward_stage_;  // per unit: the stage whose backward finishes it
  std::vector<int> first_backward_stage_;  // per unit: its first stage in backward order
  // The split of tied units (see StepResult::split_units): allowed by the placement, and
  // for the running step the ranges the last stage adds to and the rest.
  bool split_allowed_ = false;
  std::vector<std::vector<ShardRange>> late_ranges_;
  std::vector<std::vector<ShardRange>> early_ranges_;
  int split_units_ = 0;
  // Plans the split of each unit for the micro-batch `batch` (the step's only one).
  void PlanSplit(const MicroBatch& batch);
  bool Split(int unit) const {
    return early_ != nullptr && last_micro_batch_ && !late_ranges_[unit].empty();
  }
  StepContext ctx_;
  Buffer tokens_device_;    // [2][B*T] int32: inputs then targets
  Buffer losses_host_;      // [grad_accum][B*T] fp32
  Buffer norms_device_;     // [world][units] fp32: sum of squares of each owned shard
  Buffer norms_host_;       // [world][units] fp32
  Buffer loss_device_;      // [world] fp32: every rank's mean loss
  Buffer loss_host_;        // [world] fp32
  int tokens_per_micro_batch_ = 0;
  double last_forward_ms_ = 0.0;
  double last_backward_ms_ = 0.0;
  std::chrono::steady_clock::time_point backward_end_;
};

}  // namespace strata
