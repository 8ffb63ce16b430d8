// The ZeRO components the engine is assembled from. A ZeRO stage is a choice of
// components made once by MakeZeroComponents, never an `if (stage == ...)` elsewhere:
//   ParamGatherer    makes a unit's full parameters available for a stage and releases
//                    them (stage 3: all-gather of the param shards, ahead by a plan);
//   GradientReducer  owns the full gradient buffers during backward and turns each unit's
//                    finished micro-batch gradients into the fp32 gradient state (stage 0:
//                    all-reduce; 1: reduce-scatter after the backward; 2-3: reduce-scatter
//                    per unit as soon as the unit is done, full buffer freed);
//   OptimizerStepper steps the owned optimizer state and refreshes the params (stages
//                    1-2: all-gather of the updated shards).
// Where the gradient sums and the optimizer state live (device, host or nvme) is the
// business of the homes in tiers/ (grad_home.h, optimizer_home.h), which the components
// call.
// Every unit's flat buffer is padded to `world` equal shards; rank r owns shard r. Every
// collective goes on the one comm stream, ordered against compute by events, so every
// rank issues the same collectives in the same order. Reductions sum in rank order, so
// the fp32 gradient shard of a unit is bit-identical across stages at one world size.
// Thread-safety: driven by the engine's host thread; work goes onto its streams.
#pragma once

#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "kernels/ops.h"
#include "core/device.h"
#include "core/options.h"
#include "core/unit_layout.h"
#include "runtime/placement.h"
#include "tiers/grad_home.h"
#include "tiers/home_context.h"
#include "tiers/nvme_tier.h"
#include "tiers/optimizer_home.h"
#include "tiers/unit_state.h"

namespace strata {

// What the components share: the homes' context (device, kernels, streams, layouts, unit
// state) plus the communicator and the stage-3 plan's inputs.
struct ZeroContext : HomeContext {
  Communicator* communicator = nullptr;
  uint64_t prefetch_bytes = 0;
  std::vector<int> trace;  // unit of every access of one micro-batch (forward, backward)
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
  // Zeroes the fp32 gradient state (start of a step).
  virtual Status Zero() = 0;
  // True when each unit's gradient sum is final once UnitDone(unit) returned on the last
  // micro-batch (stages 2-3); false when only BackwardDone makes them final.
  virtual bool ReducesPerUnit() const = 0;
  // The split of a tied unit on the last micro-batch (one rank, per-unit reductions):
  // LandEarly adds the unit's gradient so far over `ranges` (the elements final already)
  // to the grad home while the backward goes on adding to the rest; FinishRanges adds the
  // rest and lets the buffer go, as UnitDone would.
  virtual Status LandEarly(int unit, const std::vector<ShardRange>& ranges) = 0;
  virtual Status FinishRanges(int unit,
                              const std::vector<ShardRange>& ranges) = 0;
};

class OptimizerStepper {
 public:
  virtual ~OptimizerStepper() = default;
  // One AdamW step of the owned part of `unit`, ordered after its gradient sums; refreshes
  // the params every rank uses (the next Acquire of the unit waits for them).
  virtual Status Step(int unit, const AdamParams& params) = 0;
  // zero.delayed_update: Step's AdamW with the new params held back, and their release
  // once `after` (the compute stream) has passed its last use of the old ones; the next
  // Acquire of the unit waits for them.
  virtual Status StepStaged(int unit, const AdamParams& params) = 0;
  virtual Status Publish(int unit, Stream& after) = 0;
  // While held (during backward), the all-gathers of updated params (stages 1-2 with
  // several ranks) are kept back, so that the comm stream's gradient reductions do not
  // queue behind the CPU Adam; releasing enqueues them in unit order (the same on every
  // rank).
  virtual Status HoldGathers(bool hold) = 0;
  // One sub-step over several disjoint sub-ranges of the unit's owned elements (the split
  // of a tied unit; one rank, optimizer in the host tier).
  virtual Status StepRanges(int unit, const AdamParams& params,
                            const std::vector<ShardRange>& ranges) = 0;
  // Blocks until the AdamW of every Step so far has run (param copies may be in flight).
  virtual Status WaitSteps() = 0;
  // Total milliseconds the AdamW sub-steps ran (the standalone optimizer time).
  virtual double busy_ms() const = 0;
};

struct ZeroComponents {
  // The NVMe tier (optimizer or params on nvme), then the homes: the components below
  // point into them and are destroyed before them.
  std::unique_ptr<NvmeTier> nvme;        // optimizer state
  std::unique_ptr<NvmeTier> param_nvme;  // stage-3 param shards (a queue of their own)
  std::unique_ptr<GradHome> grad_home;
  std::unique_ptr<OptimizerHome> optimizer_home;
  std::unique_ptr<ParamGatherer> gatherer;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<OptimizerStepper> stepper;
  bool sharded_optimizer = false;  // master/m/v/grad_accum hold only the own shard
  bool params_on_nvme = false;     // stage 3 param shards in `param_nvme` (params empty)
  std::vector<std::vector<NvmeChunk>> nvme_chunks;  // per unit, its shard's extents in `nvme`
};

// Allocates every unit's state for the placement's stage in its tiers and returns the
// matching components; `options` gives the NVMe tier's settings (zero.nvme_dir, nvme.*).
StatusOr<ZeroComponents> MakeZeroComponents(const Options& options, const Placement& placement,
                                            const ZeroContext& context);

}  // namespace strata
