// Engine: trains a Model on a Device with the ZeRO components its placement resolves to.
// One training step = for each micro-batch: forward over the model's stages in order,
// backward in reverse, each stage's units acquired before and released after (the
// gatherer), each unit's gradients handed to the reducer once its last backward use is
// enqueued; the step schedule (step_schedule.h) decides when each unit's optimizer
// sub-step runs (after the global norm and clipping, during backward, or during the next
// step). The engine reaches state only through the components (zero_components.h); what
// is read and written from outside the step goes through state() (engine_state.h).
// Thread-safety: not thread-safe; one host thread drives an engine. Device, Ops and Model
// must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "kernels/ops.h"
#include "device/device.h"
#include "runtime/engine_config.h"
#include "runtime/engine_state.h"
#include "runtime/grad_norm.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/step_schedule.h"
#include "runtime/zero_components.h"
#include "core/stored_layout.h"

namespace strata {

class DeferredFrees;

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
  // Of those, the params' (read ahead of the forward and backward; the rest is the
  // optimizer's state and the gradients).
  uint64_t param_nvme_read_bytes = 0;
  uint64_t param_nvme_written_bytes = 0;
  // Units whose optimizer sub-step was split this step: the elements final before the
  // unit's last backward stage stepped during the rest of backward, the rest after it
  // (a tied embedding on one rank with the optimizer and grads on the host, no clipping).
  int split_units = 0;
  // Calls to the memory driver during the step (cudaMalloc/cudaFree on CUDA, the allocator
  // on the CPU device): 0 in a steady state, where freed buffers are reused.
  uint64_t driver_calls = 0;
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

// Hybrid sharding (zero.shard_group=node): `shards` (the rank's node) splits each unit's
// state and `replicas` (its rail: the same place on every node) all-reduces the reduced
// gradient shards. Both null: the state is split over the engine communicator's world.
struct EngineShardGroups {
  Communicator* shards = nullptr;
  Communicator* replicas = nullptr;
};

class Engine {
 public:
  // `ops` are the backend's kernels (device-tier memory), `host_ops` CPU kernels on host
  // memory (the offloaded optimizer). `communicator` joins this rank to the others (world
  // size 1: a local group of one). All must outlive the engine.
  // `initial`: kModelInit fills every unit from Model::InitUnit (train.seed); kLoadedLater
  // skips that for a caller that writes every unit's state next (resuming a checkpoint):
  // until then the state is unspecified.
  enum class InitialState { kModelInit, kLoadedLater };
  using ShardGroups = EngineShardGroups;
  // `config`: EngineConfig::From(options, world).
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config, Device* device,
                                                  Ops* ops, Ops* host_ops, Model* model,
                                                  Communicator* communicator,
                                                  InitialState initial = InitialState::kModelInit,
                                                  ShardGroups groups = {});
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

  // The state read and written from outside the step (checkpoints, imports, tests).
  EngineState& state() { return state_; }
  const EngineState& state() const { return state_; }

  // Bytes of this rank's swap files (0 without nvme tiers).
  uint64_t nvme_file_bytes() const { return components_.nvme_file_bytes(); }
  // The unit access trace of one micro-batch (forward then backward).
  const std::vector<UnitAccess>& trace() const { return trace_; }
  Stream& compute_stream() { return *compute_; }

 private:
  Engine(const EngineConfig& config, Device* device, Ops* ops, Ops* host_ops, Model* model,
         Communicator* communicator, ShardGroups groups);
  Status Init(InitialState initial);
  // The gradients of `micro_batches` summed into the gradient state; `params`: the step's
  // hyper-parameters (the schedule may step units during backward), or null. Returns the
  // mean loss.
  StatusOr<double> RunGradients(const std::vector<MicroBatch>& micro_batches,
                                const AdamParams* params);
  Status RunMicroBatch(const MicroBatch& batch, int index, float dloss, double* forward_ms,
                       double* backward_ms);
  Status RunStage(int stage, bool backward, int* access);
  // A packed unit's params (lora.base_dtype): its stored bytes `stored` (as gathered)
  // dequantized on the compute stream into a buffer of its own, freed after the stage.
  StatusOr<const void*> Dequantize(int unit, const void* stored);
  // Mean of the per-rank means of this rank's losses_host_ over `micro_batches`.
  StatusOr<double> GlobalMeanLoss(int micro_batches);
  // Pending updates in place, every stream to its end, then the state's write-backs; the
  // first error of any.
  Status SyncStreams();
  const EngineConfig config_;
  Device* device_;
  Ops* ops_;
  Ops* host_ops_;
  Model* model_;
  Communicator* communicator_;  // the world: rows, loss scale and mean
  Communicator* shards_;        // the shard group: the components, the norm, the state
  Communicator* replicas_;      // hybrid sharding's rail, else null
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> comm_;
  std::unique_ptr<Stream> copy_;
  std::unique_ptr<Stream> host_;
  std::vector<UnitState> units_;
  // Each unit's stored form (core/stored_layout.h) and the layouts the components see: a
  // packed unit of a quantized base is one tensor of its stored bytes.
  std::vector<StoredUnit> stored_;
  std::vector<UnitLayout> stored_layouts_;
  std::vector<std::shared_ptr<Buffer>> dequantized_;  // per unit, during its stage
  std::unique_ptr<DeferredFrees> frees_;
  ZeroComponents components_;
  std::unique_ptr<GradNorm> norm_;
  std::unique_ptr<StepSchedule> schedule_;
  // The NVMe traffic when the last step ended (or the set-up, or a state read-out or
  // load): a step reports what moved since.
  NvmeTraffic traffic_counted_;
  std::vector<UnitAccess> trace_;
  StepContext ctx_;
  EngineState state_;  // last: it refers to the members above
  Buffer tokens_device_;    // [2][B*T] int32: inputs then targets
  Buffer losses_host_;      // [grad_accum][B*T] fp32
  Buffer loss_device_;      // [world] fp32: every rank's mean loss
  Buffer loss_host_;        // [world] fp32
  int tokens_per_micro_batch_ = 0;
  int dropout_step_ = 0;  // the step whose micro-batches run (dropout keys)
  double last_forward_ms_ = 0.0;
  double last_backward_ms_ = 0.0;
  std::chrono::steady_clock::time_point backward_end_;
};

}  // namespace strata
