// See grad_norm.h.
#include "runtime/grad_norm.h"

#include <cmath>

#include "tiers/stream_helpers.h"

namespace strata {

StatusOr<std::unique_ptr<GradNorm>> GradNorm::Create(Device* device, Communicator* communicator,
                                                     const EngineStreams& streams,
                                                     std::vector<bool> frozen) {
  const int units = static_cast<int>(frozen.size());
  std::unique_ptr<GradNorm> norm(new GradNorm(device, communicator, streams, std::move(frozen)));
  // Per rank: each unit's main part, then the early part of a split unit (0 otherwise).
  const size_t bytes =
      static_cast<size_t>(communicator->world_size()) * 2 * units * sizeof(float);
  ASSIGN_OR_RETURN(norm->parts_device_,
                   device->Allocate(Tier::kDevice, StateKind::kWorkspace, bytes, "grad norms"));
  ASSIGN_OR_RETURN(norm->parts_host_,
                   device->Allocate(Tier::kHost, StateKind::kWorkspace, bytes, "grad norms"));
  ASSIGN_OR_RETURN(norm->ready_, device->CreateEvent());
  ASSIGN_OR_RETURN(norm->join_, device->CreateEvent());
  // A frozen unit's parts are never written: they stay 0.
  RETURN_IF_ERROR(device->MemsetAsync(norm->parts_device_.data(), 0, bytes, *streams.host));
  RETURN_IF_ERROR(streams.host->Synchronize());
  return norm;
}

float* GradNorm::Slot(int unit, bool early) {
  return parts_device_.as<float>() + communicator_->rank() * 2 * units_ +
         (early ? units_ : 0) + unit;
}

Status GradNorm::Begin() {
  taken_ = frozen_;  // nothing to take of a frozen unit
  return device_->MemsetAsync(Slot(0, /*early=*/true), 0, units_ * sizeof(float),
                              *streams_.host);
}

Status GradNorm::TakePart(GradientReducer& reducer, int unit) {
  taken_[unit] = true;
  return reducer.SquaredNorm(unit, Slot(unit, /*early=*/false));
}

Status GradNorm::TakeRangesPart(RangedReduction& ranged, int unit,
                                const std::vector<ShardRange>& ranges, bool early) {
  if (!early) taken_[unit] = true;
  return ranged.SquaredNormRanges(unit, ranges, Slot(unit, early));
}

Status GradNorm::Enqueue(GradientReducer& reducer) {
  for (int u = 0; u < units_; ++u) {
    if (!taken_[u]) RETURN_IF_ERROR(TakePart(reducer, u));
  }
  // The parts come from the compute stream (device sums) and the host stream (host sums).
  RETURN_IF_ERROR(Join(*device_, *streams_.comm, *streams_.compute, *join_));
  RETURN_IF_ERROR(Join(*device_, *streams_.comm, *streams_.host, *join_));
  float* mine = parts_device_.as<float>() + communicator_->rank() * 2 * units_;
  RETURN_IF_ERROR(communicator_->AllGather(mine, parts_device_.data(), 2 * units_, DType::kF32,
                                           *streams_.comm));
  RETURN_IF_ERROR(device_->CopyAsync(parts_host_.data(), parts_device_.data(),
                                     parts_device_.bytes(), *streams_.comm));
  return device_->Record(*ready_, *streams_.comm);
}

StatusOr<double> GradNorm::Wait() {
  RETURN_IF_ERROR(ready_->Synchronize());
  RETURN_IF_ERROR(streams_.comm->Synchronize());  // the first error of the norms' path
  const int world = communicator_->world_size();
  double sum = 0.0;
  for (int u = 0; u < units_; ++u) {
    for (int r = 0; r < world; ++r) {
      const float* part = parts_host_.as<float>() + r * 2 * units_;
      sum += part[u];
      sum += part[units_ + u];  // a split unit's early part (0.0 adds nothing otherwise)
    }
  }
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) {
    // A failed transfer leaves garbage behind: its error explains the norm better.
    for (Stream* stream : {streams_.copy, streams_.host, streams_.compute}) {
      RETURN_IF_ERROR(stream->Synchronize());
    }
    return absl::DataLossError(absl::StrCat("gradient norm is not finite (", norm,
                                            "): training diverged; lower train.lr"));
  }
  return norm;
}

double GradNorm::ClipScale(double norm, double clip) {
  if (clip > 0.0 && norm > clip) return clip / (norm + 1e-6);
  return 1.0;
}

}  // namespace strata
