// Step schedules: when, within a training step, each unit's gradients are reduced and its
// optimizer sub-step runs. The engine runs plain forward and backward over the model's
// stages and calls a schedule at fixed points; the modes that change when a unit is
// stepped are schedules, or policy objects inside one, chosen once from the placement's
// capabilities (placement.h):
//   exact    every update is in place before the next step. After the last micro-batch:
//            the global norm, clipping, then the sub-steps not taken yet. With early steps
//            (a CPU optimizer, no clipping) each unit is stepped as soon as its sum is
//            final, overlapped with the rest of backward; with them, the tied split
//            (TiedSplit, one rank) lands and steps a tied unit's early-final elements
//            right after its first backward stage, and the NVMe hand-over link keeps the
//            final sums in memory for the optimizer.
//   delayed  ZeRO-Offload's one-step delayed update: the step's norm is reduced in the
//            background; the next step reads it during its forward and enqueues the AdamW,
//            whose new params replace the old ones after their last use in that step.
// Thread-safety: driven by the engine's host thread.
#pragma once

#include <memory>
#include <vector>

#include "device/device.h"
#include "runtime/components.h"
#include "runtime/grad_norm.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/zero_components.h"

namespace strata {

// One micro-batch of token ids, host memory, [B,T] each.
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
};

// What a schedule works with; everything must outlive it.
struct ScheduleContext {
  Device* device = nullptr;
  EngineStreams streams;
  ZeroComponents* components = nullptr;
  GradNorm* norm = nullptr;
  const Model* model = nullptr;
  float grad_clip = 0.0f;  // train.grad_clip
  int batch = 0;           // B (per rank)
  int seq_len = 0;         // T
  // Per unit: the stage whose backward is its first, and the one that completes its
  // gradient (they differ for a unit used by several stages, e.g. a tied embedding).
  std::vector<int> first_backward_stage;
  std::vector<int> last_backward_stage;
  const std::vector<UnitState>* units = nullptr;
};

class StepSchedule {
 public:
  // The schedule of `placement` (its update mode and capabilities).
  static StatusOr<std::unique_ptr<StepSchedule>> Create(const Placement& placement,
                                                        const ScheduleContext& context);
  virtual ~StepSchedule() = default;

  // The micro-batches of a step begin: `params` are its AdamW hyper-parameters, or null
  // when only gradients are computed (no update).
  virtual Status BeginGradients(const AdamParams* params) = 0;
  // Micro-batch `index` begins (`last`: it completes the step's sums).
  virtual Status BeginMicroBatch(const MicroBatch& batch, int index, bool last) = 0;
  // A training micro-batch's forward is enqueued.
  virtual Status AfterForward(int index) = 0;
  // Around the backward of `unit` in stage `stage` (its gradient buffer is the reducer's).
  virtual Status BeforeBackward(int stage, int unit) = 0;
  virtual Status AfterBackward(int stage, int unit) = 0;
  // The micro-batch is over (called on failure too).
  virtual Status EndMicroBatch() = 0;
  // The step's micro-batches are done: the update (delayed: its start). Returns the
  // gradient norm to report (delayed: that of the update enqueued during this step).
  virtual StatusOr<double> FinishStep(AdamParams params) = 0;
  // Every pending update in place, before params are read outside a step (an
  // evaluation, a read-out, the end of training).
  virtual Status Settle() = 0;
  // Units whose sub-step was split in the last step.
  virtual int split_units() const { return 0; }
};

}  // namespace strata
