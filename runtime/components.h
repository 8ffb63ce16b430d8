// The ZeRO components the engine is assembled from. A ZeRO stage is a choice of
// components made once by MakeZeroComponents (zero_components.h), never an
// `if (stage == ...)` elsewhere:
//   ParamGatherer    makes a unit's full parameters available for a stage and releases
//                    them (stage 3: all-gather of the param shards, ahead by a plan:
//                    prefetch_executor.h);
//   GradientReducer  owns the full gradient buffers during backward and turns each unit's
//                    finished micro-batch gradients into the fp32 gradient sums (stage 0:
//                    all-reduce; 1: reduce-scatter after the backward; 2-3: reduce-scatter
//                    per unit as soon as the unit is done, full buffer freed);
//   OptimizerStepper steps the owned optimizer state and refreshes the params (stages
//                    1-2: all-gather of the updated shards).
// Where params, gradient sums and optimizer state live (device, host or nvme) is the
// business of the homes in tiers/ (param_home.h, grad_home.h, optimizer_home.h), which the
// components call. Special modes reach the components through optional capabilities (null
// where a component cannot do them), asked for by the step schedules (step_schedule.h).
// Every unit's flat buffer is padded to equal shards, one per rank of the shard group (the
// world, or the node with hybrid sharding); rank r of the group owns shard r. Every
// collective goes on the one comm stream, ordered against compute by events, so every
// rank issues the same collectives in the same order. Reductions sum in rank order, so
// the fp32 gradient shard of a unit is bit-identical across stages at one world size.
// Thread-safety: driven by the engine's host thread; work goes onto its streams.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "device/device.h"
#include "kernels/ops.h"
#include "tiers/home_context.h"

namespace strata {

// What the components share: the homes' context (device, kernels, streams, layouts, unit
// state) plus the communicator and the stage-3 plan's inputs.
struct ZeroContext : HomeContext {
  // The ranks each unit is sharded over (the world, or with zero.shard_group=node the
  // rank's node): shards, reduce-scatters and gathers are this communicator's.
  Communicator* communicator = nullptr;
  // Hybrid sharding (zero.shard_group=node): the ranks holding the same shard on the other
  // nodes, over which each reduced gradient shard is all-reduced; null otherwise.
  Communicator* replicas = nullptr;
  // This rank in the world (its swap files' names): communicator's rank unless hybrid.
  int world_rank = 0;
  uint64_t prefetch_bytes = 0;
  std::vector<int> trace;  // unit of every access of one micro-batch (forward, backward)
};

// Per unit, the event after which freshly updated params are in place, set by the
// stepper and consumed (waited on once) by the gatherer's next use of the unit.
struct FreshParams {
  std::vector<Event*> pending;
  // Makes `stream` wait for the unit's update, if one is pending.
  Status WaitOn(Device& device, Stream& stream, int unit) {
    Event* event = pending[unit];
    if (event == nullptr) return absl::OkStatus();
    pending[unit] = nullptr;
    return device.Wait(stream, *event);
  }
};

// Counters of the gatherer's executor, reported per step.
struct GatherStats {
  uint64_t gathers = 0;      // all-gathers issued
  uint64_t deviations = 0;   // accesses that did not follow the plan (fetched on demand)
};

class ParamGatherer {
 public:
  virtual ~ParamGatherer() = default;
  // Access number `access` of the micro-batch's trace needs `unit`: returns its full
  // parameters (compute dtype, device tier), valid until Release.
  virtual StatusOr<const void*> Acquire(int access, int unit) = 0;
  // Access `access` of `unit` has been enqueued on the compute stream.
  virtual Status Release(int access, int unit) = 0;
  // The micro-batch is over: nothing stays gathered.
  virtual Status EndMicroBatch() = 0;
  virtual GatherStats stats() const = 0;
};

class RangedReduction;

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // The full gradient buffer of `unit` (compute dtype, zeroed at first use in the
  // micro-batch) that backward kernels accumulate into.
  virtual StatusOr<void*> Grads(int unit) = 0;
  // The unit's gradients of this micro-batch are complete (its last backward use is
  // enqueued on the compute stream).
  virtual Status UnitDone(int unit) = 0;
  // The micro-batch's backward is fully enqueued.
  virtual Status BackwardDone() = 0;
  // Zeroes the fp32 gradient sums (start of a step).
  virtual Status Zero() = 0;
  // True when each unit's gradient sum is final once UnitDone(unit) returned on the last
  // micro-batch (stages 2-3); false when only BackwardDone makes them final.
  virtual bool ReducesPerUnit() const = 0;
  // True when the sums live off the device (host or nvme): a unit's norm part is then
  // best taken as soon as its sum is final, in the host stream's order.
  virtual bool SumsOffDevice() const = 0;
  // *out_device (one fp32, device tier) = the sum of squares of this rank's owned part of
  // the unit's gradient sums, once its Adds are done.
  virtual Status SquaredNorm(int unit, float* out_device) = 0;
  // Copies this rank's sums of `unit` (its state length: full or shard) to host memory.
  // Blocking; the streams must be idle.
  virtual Status ReadSums(int unit, float* out) = 0;
  // Capability: a unit's gradient landed in two range sets (the split of a tied unit:
  // one rank, per-unit reductions, sums in the host tier); null elsewhere.
  virtual RangedReduction* ranged() { return nullptr; }
};

// The split of a tied unit on the last micro-batch: LandEarly adds the unit's gradient so
// far over `ranges` (the elements final already) to the sums while the backward goes on
// adding to the rest; FinishRanges adds the rest and lets the buffer go, as UnitDone would.
class RangedReduction {
 public:
  virtual ~RangedReduction() = default;
  virtual Status LandEarly(int unit, const std::vector<ShardRange>& ranges) = 0;
  virtual Status FinishRanges(int unit, const std::vector<ShardRange>& ranges) = 0;
  // Makes `stream` wait until the early landing has read the unit's gradient buffer (the
  // backward stage that adds to it again runs after).
  virtual Status WaitForLanding(int unit, Stream& stream) = 0;
  // *out_device = the sum of squares of the unit's sums over `ranges`, in their order.
  virtual Status SquaredNormRanges(int unit, const std::vector<ShardRange>& ranges,
                                   float* out_device) = 0;
};

class StagedSteps;
class RangedSteps;

class OptimizerStepper {
 public:
  virtual ~OptimizerStepper() = default;
  // One AdamW step of the owned part of `unit`, ordered after its gradient sums; refreshes
  // the params every rank uses (the next Acquire of the unit waits for them).
  virtual Status Step(int unit, const AdamParams& params) = 0;
  // While held (during backward), the all-gathers of updated params (stages 1-2 with
  // several ranks) are kept back, so that the comm stream's gradient reductions do not
  // queue behind the CPU Adam; releasing enqueues them in unit order (the same on every
  // rank).
  virtual Status HoldGathers(bool hold) = 0;
  // Blocks until the AdamW of every Step so far has run (param copies may be in flight).
  virtual Status WaitSteps() = 0;
  // Total milliseconds the AdamW sub-steps ran (the standalone optimizer time).
  virtual double busy_ms() const = 0;
  // Capabilities (the optimizer in the host tier), null elsewhere: updates held back and
  // published after the old params' last use (the delayed update); sub-steps over several
  // ranges of a unit (the split of a tied unit).
  virtual StagedSteps* staged() { return nullptr; }
  virtual RangedSteps* ranged() { return nullptr; }
};

class StagedSteps {
 public:
  virtual ~StagedSteps() = default;
  // Step's AdamW with the new params held back, and their release once `after` (the
  // compute stream) has passed its last use of the old ones; the next Acquire of the unit
  // waits for them.
  virtual Status StepStaged(int unit, const AdamParams& params) = 0;
  virtual Status Publish(int unit, Stream& after) = 0;
};

class RangedSteps {
 public:
  virtual ~RangedSteps() = default;
  // One sub-step over several disjoint sub-ranges of the unit's owned elements.
  virtual Status StepRanges(int unit, const AdamParams& params,
                            const std::vector<ShardRange>& ranges) = 0;
};

}  // namespace strata
