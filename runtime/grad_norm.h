// The global L2 norm of the gradient for clipping, from per-(unit, rank) parts summed in
// one fixed order on every rank, so it is the same number whatever the stage and world
// size. Each rank's parts are squared sums of the gradient it owns, taken where the sums
// live (the compute stream for device sums, the host stream for host and nvme sums), as
// early as each unit's sum is final where that helps; the parts of all ranks are then
// gathered on the comm stream and summed by the host. A unit may have two parts (the split
// of a tied unit: the ranges final early, then the rest).
// Thread-safety: driven by the engine's host thread.
#pragma once

#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/components.h"

namespace strata {

struct EngineStreams {
  Stream* compute = nullptr;
  Stream* comm = nullptr;
  Stream* copy = nullptr;
  Stream* host = nullptr;
};

class GradNorm {
 public:
  // `frozen[u]`: unit u has no gradients (a LoRA base); its part is 0. One entry per unit.
  static StatusOr<std::unique_ptr<GradNorm>> Create(Device* device, Communicator* communicator,
                                                    const EngineStreams& streams,
                                                    std::vector<bool> frozen);

  // A step's gradients begin: no part is taken; the early parts start at 0 (in the order
  // of the host stream, which writes them).
  Status Begin();
  // The unit's part, from its final sums.
  Status TakePart(GradientReducer& reducer, int unit);
  // The unit's part over `ranges` of its sums: its early part (the ranges final before its
  // last backward stage) or its main part (the rest).
  Status TakeRangesPart(RangedReduction& ranged, int unit, const std::vector<ShardRange>& ranges,
                        bool early);
  bool taken(int unit) const { return taken_[unit]; }
  // Takes every part not taken yet, then gathers every rank's parts (comm stream).
  Status Enqueue(GradientReducer& reducer);
  // The global norm of the last Enqueue (blocks for it). A norm that is not finite is a
  // DataLoss error (training diverged), unless a stream failed: then its error.
  StatusOr<double> Wait();

  // The factor the update scales the gradient by: clip / norm where the norm exceeds
  // `clip` (> 0), else 1.
  static double ClipScale(double norm, double clip);

 private:
  GradNorm(Device* device, Communicator* communicator, const EngineStreams& streams,
           std::vector<bool> frozen)
      : device_(device), communicator_(communicator), streams_(streams),
        units_(static_cast<int>(frozen.size())), frozen_(std::move(frozen)),
        taken_(units_, false) {}
  // This rank's slot of `unit`'s main (early = false) or early part.
  float* Slot(int unit, bool early);

  Device* device_;
  Communicator* communicator_;
  EngineStreams streams_;
  int units_;
  std::vector<bool> frozen_;
  std::vector<bool> taken_;
  Buffer parts_device_;  // [world][2][units] fp32: main parts, then early parts
  Buffer parts_host_;
  std::unique_ptr<Event> ready_;  // parts_host_ filled (comm stream)
  std::unique_ptr<Event> join_;
};

}  // namespace strata
