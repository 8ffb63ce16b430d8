// Homes of the optimizer state: where a unit's fp32 master weights and Adam moments live,
// and where and how its AdamW sub-steps run.
//   device  the state in the device pool, stepped with the backend's kernels on the compute
//           stream (the ZeRO stages alone);
//   host    ZeRO-Offload: the state in the host pool, stepped by the SIMD CPU Adam on the
//           host stream; the updated params (compute dtype) go host -> device on the copy
//           stream;
//   nvme    ZeRO-Infinity: the state in the NvmeTier's swap file, chunk by chunk through a
//           few host buffer sets (read -> CPU Adam -> write back).
// An optimizer home reads the sums of the GradHome it is given (an optimizer on the host
// reads device sums through a copy). Thread-safety: driven by the engine's host thread;
// work goes onto the streams.
#pragma once

#include <memory>
#include <vector>

#include "tiers/grad_home.h"
#include "tiers/home_context.h"
#include "nvme/nvme_tier.h"
#include "tiers/param_home.h"

namespace strata {

class StagedOptimizerHome;

class OptimizerHome {
 public:
  // master/exp_avg/exp_avg_sq must already be allocated in `tier`, the moments zeroed
  // (a store without moments leaves them as they are until the unit's first step), and, for the host
  // tier, the host staging buffers the placement needs (see tiers/unit_state.h). The
  // updated params go to `params`' parts (an optimizer on the device needs them on the
  // device). `grads` and `params` must outlive the home.
  static StatusOr<std::unique_ptr<OptimizerHome>> Create(const HomeContext& ctx, Tier tier,
                                                         GradHome* grads, ParamHome* params);
  // ZeRO-Infinity: master/exp_avg/exp_avg_sq of every unit live in `nvme`, one extent
  // per chunk (NvmeChunks of the units' shards, fp32). A sub-step reads a chunk's state
  // into one of `slots` host buffer sets, steps it with the CPU Adam on the host stream
  // and writes it back, and the updated params go to the device, to the host tier, or,
  // where `params` are on nvme, back to their swap file (ParamHome::write_back), so host
  // memory holds `slots` chunks' state, whatever the model's size. With `grads` on nvme,
  // each chunk's gradient sum is read with the chunk's state (it is not part of the read
  // ahead made at the end of a step: the sums are not there yet), or taken from
  // `hand_over` (null: none) where the grad home kept it in memory. The tier, `grads`,
  // `params` and `hand_over` must outlive the home.
  static StatusOr<std::unique_ptr<OptimizerHome>> CreateNvme(
      const HomeContext& ctx, GradHome* grads, NvmeTier* nvme,
      std::vector<std::vector<NvmeChunk>> chunks, ParamHome* params, int slots,
      SumHandOver* hand_over);
  virtual ~OptimizerHome() = default;
  // Where the optimizer runs: kDevice (backend kernels) or kHost (the CPU Adam; its state
  // in the host tier or on nvme).
  virtual Tier tier() const = 0;

  // One AdamW sub-step of `unit` over the unit elements `range`, tensor by tensor (weight
  // decay only where the tensor asks). The state buffers hold unit elements from
  // `state_offset` on; the updated params (compute dtype) for element range.begin go to
  // `param_dest` (in the param home's part; ignored where the params are on nvme).
  // Ordered after the unit's gradient sums.
  virtual Status Step(int unit, const AdamParams& params, ShardRange range,
                      size_t state_offset, void* param_dest) = 0;
  // Recorded once the params of the unit's last Step are in `param_dest`.
  virtual Event& params_ready(int unit) = 0;
  // Blocks until every AdamW enqueued so far has run (copies may still be in flight).
  virtual Status WaitSteps() = 0;
  // Milliseconds the AdamW sub-steps have run so far, in total (the standalone time).
  virtual double busy_ms() const = 0;
  // The owned fp32 optimizer state of a unit (its state length each), to or from host
  // memory; a null array is skipped on load, and on store means zeros (a null master is
  // not allowed). Blocking; the streams must be idle.
  virtual Status ReadState(int unit, float* master, float* exp_avg, float* exp_avg_sq) = 0;
  virtual Status WriteState(int unit, const float* master, const float* exp_avg,
                            const float* exp_avg_sq) = 0;
  // 8-bit states (train.optimizer_states = int8: the unit's state_runs are set): one moment
  // (0: exp_avg, 1: exp_avg_sq) of a unit in its stored form over the unit's state range
  // (tiers/state_blocks.h: SectionsOf(state_runs).bytes() bytes), to or from host memory,
  // as it is: no conversion. Blocking; the streams must be idle. WriteState with a null
  // moment, then WriteMoment, restores a unit exactly (a checkpoint of int8 states).
  virtual Status ReadMoment(int unit, int moment, uint8_t* stored) = 0;
  virtual Status WriteMoment(int unit, int moment, const uint8_t* stored) = 0;
  // Blocks until every write-back of state is on its tier; the first error, if any.
  virtual Status Flush() = 0;

  // Capability, null where the home has none: updates held back and published later, and
  // sub-steps over several ranges (the host home: the delayed update, the tied split).
  virtual StagedOptimizerHome* staged() { return nullptr; }
};

// Capability of the host optimizer home.
class StagedOptimizerHome {
 public:
  virtual ~StagedOptimizerHome() = default;
  // Step's AdamW, with the updated params left staged on the host; PublishStaged copies
  // them to `param_dest` (for element range.begin) once `after` has passed everything
  // enqueued on it so far (the last use of the old params), and records params_ready.
  virtual Status StepStaged(int unit, const AdamParams& params, ShardRange range,
                            size_t state_offset) = 0;
  virtual Status PublishStaged(int unit, ShardRange range, void* param_dest,
                               Stream& after) = 0;
  // Step over several disjoint sub-ranges of the unit's elements (each within the state
  // from `state_offset` on) as one sub-step; `param_dest` is the params' element
  // state_offset in the device tier.
  virtual Status StepRanges(int unit, const AdamParams& params,
                            const std::vector<ShardRange>& ranges, size_t state_offset,
                            void* param_dest) = 0;
};

}  // namespace strata
