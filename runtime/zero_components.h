// The ZeRO components the engine is assembled from. A ZeRO stage is a choice of
// components made once by MakeZeroComponents, never an `if (stage == ...)` elsewhere:
//   ParamGatherer    makes a unit's full parameters available for a stage and releases them;
//   GradientReducer  takes a unit's finished full gradients of one micro-batch into the
//                    fp32 gradient state (stage 0: in place; 1-2: reduce-scatter to owner);
//   OptimizerStepper steps a unit's owned optimizer state and refreshes its parameters.
// Only stage 0 (everything replicated, world size 1) exists so far; stages 1-3 add
// implementations here, not branches in the engine.
// Thread-safety: driven by the engine's host thread; all work goes onto its streams.
#pragma once

#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "runtime/core/device.h"
#include "runtime/core/options.h"
#include "runtime/unit_layout.h"

namespace strata {

// One unit's state on this rank. Which buffers are full-size or shards depends on the
// stage; the components that own the state know.
struct UnitState {
  Buffer params;      // compute dtype: full (stages 0-2)
  Buffer grads;       // compute dtype: full, during backward
  Buffer grad_accum;  // fp32: gradient summed over micro-batches (owned part)
  Buffer master;      // fp32 master weights (owned part)
  Buffer exp_avg;     // fp32 Adam first moment (owned part)
  Buffer exp_avg_sq;  // fp32 Adam second moment (owned part)
  size_t padded_elements = 0;
};

// What the components share: the device, kernels, streams, layouts and unit state.
struct ZeroContext {
  Device* device = nullptr;
  Ops* ops = nullptr;
  Stream* compute = nullptr;
  const std::vector<UnitLayout>* layouts = nullptr;
  std::vector<UnitState>* units = nullptr;
  DType dtype = DType::kF32;
  int world_size = 1;
};

class ParamGatherer {
 public:
  virtual ~ParamGatherer() = default;
  // Returns the unit's full parameters (compute dtype, device tier), valid until Release.
  virtual StatusOr<const void*> Acquire(int unit) = 0;
  virtual Status Release(int unit) = 0;
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // The unit's full gradients for this micro-batch are complete on the compute stream:
  // add them to the fp32 gradient state and zero them for the next micro-batch.
  virtual Status Reduce(int unit) = 0;
  // Writes sum(grad_accum^2) of the owned part of `unit` into *result (device tier).
  virtual Status SumSquares(int unit, float* result) = 0;
  // Zeroes the fp32 gradient state after an optimizer step.
  virtual Status Zero(int unit) = 0;
};

class OptimizerStepper {
 public:
  virtual ~OptimizerStepper() = default;
  // One AdamW step of the owned part of `unit`; refreshes the compute-dtype params.
  virtual Status Step(int unit, const AdamParams& params) = 0;
};

struct ZeroComponents {
  std::unique_ptr<ParamGatherer> gatherer;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<OptimizerStepper> stepper;
};

// Allocates every unit's state for options.zero and returns the matching components.
// Fails with a clear message for a stage or world size this build cannot run.
StatusOr<ZeroComponents> MakeZeroComponents(const Options& options, const ZeroContext& context);

}  // namespace strata
