// The assembled ZeRO components of one engine and the homes they work on, made once by
// MakeZeroComponents from the resolved placement (placement.h): the stage picks the
// components (components.h), the placement the homes (tiers/). The engine talks to these
// only: the gatherer, the reducer and the stepper during a step, and the state read-outs
// and loads here between steps; the homes stay inside.
// Thread-safety: driven by the engine's host thread; work goes onto its streams.
#pragma once

#include <memory>
#include <vector>

#include "runtime/components.h"
#include "runtime/engine_config.h"
#include "runtime/placement.h"
#include "tiers/grad_home.h"
#include "nvme/nvme_tier.h"
#include "tiers/optimizer_home.h"
#include "tiers/param_home.h"

namespace strata {

// NVMe traffic of a rank so far: the optimizer's tier (state and gradient sums) and the
// params' tier, bytes moved and time with requests at the disk.
struct NvmeTraffic {
  uint64_t read_bytes = 0;     // every tier's
  uint64_t written_bytes = 0;
  uint64_t param_read_bytes = 0;  // the params' tier's alone (part of the above)
  uint64_t param_written_bytes = 0;
  double busy_ms = 0.0;        // the optimizer's tier
  double param_busy_ms = 0.0;  // the params' tier
};

class ZeroComponents {
 public:
  ZeroComponents() = default;
  ZeroComponents(ZeroComponents&&) = default;
  ZeroComponents& operator=(ZeroComponents&&) = default;

  ParamGatherer& gatherer() { return *gatherer_; }
  GradientReducer& reducer() { return *reducer_; }
  OptimizerStepper& stepper() { return *stepper_; }
  // The link between the NVMe gradient and optimizer homes; null unless both are on nvme.
  SumHandOver* hand_over() { return hand_over_; }

  // The optimizer state and gradient sums hold this rank's shard of each unit (stages
  // 1-3), else the full unit.
  bool sharded_state() const { return sharded_state_; }
  // This rank's fp32 optimizer state of `unit` (full or shard, as sharded_state says) to
  // or from host memory; null arrays are skipped on load and zeros on store (the master is
  // required). Blocking; the streams must be idle.
  Status ReadOptimizerState(int unit, float* master, float* exp_avg, float* exp_avg_sq);
  Status WriteOptimizerState(int unit, const float* master, const float* exp_avg,
                             const float* exp_avg_sq);
  // 8-bit states: one moment (0: exp_avg, 1: exp_avg_sq) of `unit` in its stored form over
  // the state range (OptimizerHome::ReadMoment: SectionsOf(state_runs).bytes()). Blocking.
  Status ReadMoment(int unit, int moment, uint8_t* stored) {
    return optimizer_home_->ReadMoment(unit, moment, stored);
  }
  Status WriteMoment(int unit, int moment, const uint8_t* stored) {
    return optimizer_home_->WriteMoment(unit, moment, stored);
  }
  // The elements of `unit`'s params this rank stores (the full unit, or its shard at stage
  // 3), and their store from host memory (compute dtype). Blocking; the streams must be
  // idle.
  size_t param_part_elements(int unit) const { return param_home_->part_elements(unit); }
  Status WriteParams(int unit, const void* values) { return param_home_->Write(unit, values); }
  // The unit's param part in memory (device or host tier), or null on nvme.
  void* param_part(int unit) const { return param_home_->part(unit); }
  Status ReadParams(int unit, void* out) { return param_home_->Read(unit, out); }
  // Blocks until every write-back of state is on its tier; the first error, if any.
  Status Flush() { return optimizer_home_->Flush(); }
  NvmeTraffic traffic() const;
  // Bytes of this rank's swap files (optimizer state, gradient sums, params).
  uint64_t nvme_file_bytes() const {
    return (nvme_ != nullptr ? nvme_->file_bytes() : 0) + param_home_->nvme_file_bytes();
  }

 private:
  friend StatusOr<ZeroComponents> MakeZeroComponents(const EngineConfig&, const ZeroContext&);
  static Status Assemble(const EngineConfig& config, const ZeroContext& context,
                         ZeroComponents& components);
  // Destroyed in reverse: the components first, then the homes they point into, then the
  // optimizer's NVMe tier the gradient and optimizer homes share.
  std::unique_ptr<NvmeTier> nvme_;
  std::unique_ptr<ParamHome> param_home_;
  std::unique_ptr<GradHome> grad_home_;
  std::unique_ptr<OptimizerHome> optimizer_home_;
  std::unique_ptr<ParamGatherer> gatherer_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<OptimizerStepper> stepper_;
  SumHandOver* hand_over_ = nullptr;
  bool sharded_state_ = false;
};

// Allocates every unit's state for config.placement's stage in its tiers and returns the
// matching components; config.nvme gives the NVMe tiers' settings. Fills context.units
// (sizes and buffers).
StatusOr<ZeroComponents> MakeZeroComponents(const EngineConfig& config,
                                            const ZeroContext& context);

}  // namespace strata
