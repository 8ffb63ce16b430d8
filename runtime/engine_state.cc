// EngineState: the engine's state read and written from outside the step; see
// engine_state.h.
#include "runtime/engine_state.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "kernels/ops.h"
#include "runtime/model.h"
#include "runtime/quantized_base.h"
#include "runtime/zero_components.h"
#include "tiers/state_blocks.h"
#include "tiers/unit_state.h"

namespace strata {

size_t EngineState::PaddedElements(int unit) const {
  if (Packed(unit)) {
    return parts_.model->units()[unit].PaddedElements(parts_.communicator->world_size());
  }
  return parts_.units[unit].padded_elements;
}

StatusOr<std::vector<uint8_t>> EngineState::ReadStoredBytes(int unit) {
  RETURN_IF_ERROR(parts_.sync());
  const UnitState& state = parts_.units[unit];
  const size_t element_bytes = DTypeBytes(parts_.config.dtype);
  const size_t n = parts_.components.param_part_elements(unit);
  std::vector<uint8_t> out(state.padded_elements * element_bytes);
  if (n == state.padded_elements) {
    RETURN_IF_ERROR(parts_.components.ReadParams(unit, out.data()));
    ForgetTraffic();
    return out;
  }
  // The own shard, then every rank's gathered as raw words (a shard is a multiple of 4 KiB).
  std::vector<uint8_t> own(n * element_bytes);
  RETURN_IF_ERROR(parts_.components.ReadParams(unit, own.data()));
  ForgetTraffic();
  const size_t shard_bytes = state.shard_elements * element_bytes;
  ASSIGN_OR_RETURN(Buffer full, parts_.device->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                        out.size(), "unit read-out"));
  uint8_t* mine = static_cast<uint8_t*>(full.data()) + parts_.communicator->rank() * shard_bytes;
  RETURN_IF_ERROR(parts_.device->CopyAsync(mine, own.data(), shard_bytes, comm()));
  RETURN_IF_ERROR(parts_.communicator->AllGather(mine, full.data(), shard_bytes / 4, DType::kF32,
                                                 comm()));
  RETURN_IF_ERROR(parts_.device->CopyAsync(out.data(), full.data(), out.size(), comm()));
  RETURN_IF_ERROR(comm().Synchronize());
  return out;
}

Status EngineState::WritePacked(int unit, const UnitFill& values) {
  const auto [begin, end] = StoredRange(unit);
  const size_t element_bytes = DTypeBytes(parts_.config.dtype);
  if (store_host_.size() < (end - begin) * element_bytes) {
    store_host_.resize((end - begin) * element_bytes);
  }
  RETURN_IF_ERROR(PackRange(parts_.stored[unit], parts_.model->units()[unit], values,
                            begin * element_bytes, end * element_bytes,
                            reinterpret_cast<uint8_t*>(store_host_.data())));
  RETURN_IF_ERROR(parts_.sync());
  Status status = parts_.components.WriteParams(unit, store_host_.data());
  ForgetTraffic();
  return status;
}

void EngineState::ForgetTraffic() { parts_.traffic_counted = parts_.components.traffic(); }

StatusOr<std::vector<float>> EngineState::ReadFull(int unit, std::vector<float> own_part) {
  if (!parts_.components.sharded_state()) return own_part;  // already the full unit
  std::vector<float> values;
  RETURN_IF_ERROR(GatherInto(unit, own_part.data(), &values));
  return values;
}

Status EngineState::GatherInto(int unit, const float* own_part, std::vector<float>* out) {
  const UnitState& state = parts_.units[unit];
  out->resize(state.padded_elements);
  ASSIGN_OR_RETURN(Buffer full, parts_.device->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                  out->size() * sizeof(float), "unit read-out"));
  // The own shard into its place, then gathered in place.
  float* own = full.as<float>() + parts_.communicator->rank() * state.shard_elements;
  RETURN_IF_ERROR(parts_.device->CopyAsync(own, own_part, state.shard_elements * sizeof(float),
                                     comm()));
  RETURN_IF_ERROR(parts_.communicator->AllGather(own, full.data(), state.shard_elements, DType::kF32,
                                           comm()));
  RETURN_IF_ERROR(parts_.device->CopyAsync(out->data(), full.data(), out->size() * sizeof(float),
                                     comm()));
  return comm().Synchronize();
}

size_t EngineState::StateElements(int unit) const {
  const UnitState& state = parts_.units[unit];
  return parts_.components.sharded_state() ? state.shard_elements : state.padded_elements;
}

Status EngineState::CheckTrainable(int unit) const {
  if (parts_.model->units()[unit].trainable()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "unit '", parts_.model->units()[unit].name(),
      "' is frozen (a LoRA base): it has no master weights, optimizer state or gradients, "
      "only its params (EngineState::ReadParams)"));
}

StatusOr<std::vector<float>> EngineState::ReadParams(int unit) {
  if (Packed(unit)) {
    ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, ReadStoredBytes(unit));
    std::vector<float> values(PaddedElements(unit), 0.0f);
    RETURN_IF_ERROR(UnpackUnit(parts_.stored[unit], parts_.model->units()[unit], bytes.data(),
                               values.data()));
    return values;
  }
  RETURN_IF_ERROR(parts_.sync());
  const UnitState& state = parts_.units[unit];
  const size_t n = parts_.components.param_part_elements(unit);
  std::vector<char> part(n * DTypeBytes(parts_.config.dtype));
  RETURN_IF_ERROR(parts_.components.ReadParams(unit, part.data()));
  std::vector<float> own(n);
  RETURN_IF_ERROR(parts_.host_ops->CastToFloat(host(), own.data(), part.data(), n));
  RETURN_IF_ERROR(host().Synchronize());
  ForgetTraffic();
  if (n == state.padded_elements) return own;
  std::vector<float> values;
  RETURN_IF_ERROR(GatherInto(unit, own.data(), &values));
  return values;
}

StatusOr<std::vector<float>> EngineState::ReadMaster(int unit) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  RETURN_IF_ERROR(parts_.sync());
  std::vector<float> own(StateElements(unit));
  RETURN_IF_ERROR(parts_.components.ReadOptimizerState(unit, own.data(), nullptr, nullptr));
  return ReadFull(unit, std::move(own));
}

StatusOr<std::vector<float>> EngineState::ReadGradients(int unit) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  RETURN_IF_ERROR(parts_.sync());
  std::vector<float> own(StateElements(unit));
  RETURN_IF_ERROR(parts_.components.reducer().ReadSums(unit, own.data()));
  return ReadFull(unit, std::move(own));
}

StatusOr<UnitOptimizerState> EngineState::ReadOptimizerState(int unit) {
  UnitOptimizerState out;
  RETURN_IF_ERROR(ReadOptimizerState(unit, &out));
  return out;
}

Status EngineState::ReadOptimizerState(int unit, UnitOptimizerState* out) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  RETURN_IF_ERROR(parts_.sync());
  const size_t n = StateElements(unit);
  std::vector<float>* arrays[3] = {&out->master, &out->exp_avg, &out->exp_avg_sq};
  if (!parts_.components.sharded_state()) {
    for (std::vector<float>* array : arrays) array->resize(n);
    RETURN_IF_ERROR(parts_.components.ReadOptimizerState(unit, out->master.data(),
                                                    out->exp_avg.data(),
                                                    out->exp_avg_sq.data()));
  } else {
    std::vector<float> own[3];
    for (std::vector<float>& part : own) part.resize(n);
    RETURN_IF_ERROR(parts_.components.ReadOptimizerState(unit, own[0].data(), own[1].data(),
                                                    own[2].data()));
    for (int k = 0; k < 3; ++k) RETURN_IF_ERROR(GatherInto(unit, own[k].data(), arrays[k]));
  }
  ForgetTraffic();
  return absl::OkStatus();
}

Status EngineState::WriteMaster(int unit, const std::vector<float>& values) {
  return WriteOptimizerState(unit, {values, {}, {}});
}

Status EngineState::WriteOptimizerState(int unit, const UnitOptimizerState& full_state) {
  const size_t padded = PaddedElements(unit);
  for (const std::vector<float>* array :
       {&full_state.master, &full_state.exp_avg, &full_state.exp_avg_sq}) {
    const bool moments_left_out = array != &full_state.master && array->empty();
    if (array->size() != padded && !moments_left_out) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit ", unit, " has ", padded, " elements, got ", array->size()));
    }
  }
  auto data = [](const std::vector<float>& array) {
    return array.empty() ? nullptr : array.data();
  };
  if (Packed(unit)) {  // frozen: its params alone, quantized from the values
    const float* values = full_state.master.data();
    return WritePacked(unit, [values](size_t begin, size_t end, float* out) {
      std::copy(values + begin, values + end, out);
      return absl::OkStatus();
    });
  }
  Status status = WriteState(unit, {full_state.master.data(), data(full_state.exp_avg),
                                        data(full_state.exp_avg_sq), 0, padded});
  ForgetTraffic();
  return status;
}

Status EngineState::WriteStoredState(int unit, const float* master, const float* exp_avg,
                                const float* exp_avg_sq) {
  const auto [begin, end] = StoredRange(unit);
  Status status = WriteState(unit, {master, exp_avg, exp_avg_sq, begin, end});
  ForgetTraffic();
  return status;
}

Status EngineState::Sync() { return parts_.sync(); }

std::pair<size_t, size_t> EngineState::StateRange(int unit) const {
  const UnitState& state = parts_.units[unit];
  if (!parts_.components.sharded_state()) return {0, state.padded_elements};
  const ShardRange own = OwnedRange(state, parts_.communicator->rank());
  return {own.begin, own.end};
}

Status EngineState::ReadStateRange(int unit, float* master, float* exp_avg, float* exp_avg_sq) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  RETURN_IF_ERROR(parts_.sync());
  Status status = parts_.components.ReadOptimizerState(unit, master, exp_avg, exp_avg_sq);
  ForgetTraffic();
  return status;
}

Status EngineState::WriteStateRange(int unit, const float* master, const float* exp_avg,
                                    const float* exp_avg_sq) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  const auto [begin, end] = StateRange(unit);
  const auto [stored_begin, stored_end] = StoredRange(unit);
  Status status;
  if (stored_begin >= begin && stored_end <= end) {
    status = WriteState(unit, {master, exp_avg, exp_avg_sq, begin, end});
  } else {
    // Whole params from a sharded state (stages 1-2): every rank's master, gathered.
    RETURN_IF_ERROR(parts_.sync());
    std::vector<float> full;
    RETURN_IF_ERROR(GatherInto(unit, master, &full));
    status = WriteState(unit, {master, exp_avg, exp_avg_sq, begin, end}, nullptr, full.data());
  }
  ForgetTraffic();
  return status;
}

const std::vector<StateRun>& EngineState::MomentRuns(int unit) const {
  return parts_.units[unit].state_runs;
}

size_t EngineState::StoredMomentBytes(int unit) const {
  return SectionsOf(parts_.units[unit].state_runs).bytes();
}

Status EngineState::ReadStateRange8Bit(int unit, float* master, uint8_t* exp_avg,
                                       uint8_t* exp_avg_sq) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  RETURN_IF_ERROR(parts_.sync());
  Status status = parts_.components.ReadOptimizerState(unit, master, nullptr, nullptr);
  if (status.ok()) status = parts_.components.ReadMoment(unit, 0, exp_avg);
  if (status.ok()) status = parts_.components.ReadMoment(unit, 1, exp_avg_sq);
  ForgetTraffic();
  return status;
}

Status EngineState::WriteStateRange8Bit(int unit, const float* master, const uint8_t* exp_avg,
                                        const uint8_t* exp_avg_sq) {
  RETURN_IF_ERROR(CheckTrainable(unit));
  if (MomentRuns(unit).empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unit '", parts_.model->units()[unit].name(),
        "' has fp32 Adam moments (train.optimizer_states=fp32): no 8-bit moments to write"));
  }
  // The master (and params) with zeroed moments, then each moment as it is.
  RETURN_IF_ERROR(WriteStateRange(unit, master, nullptr, nullptr));
  RETURN_IF_ERROR(parts_.sync());
  Status status = parts_.components.WriteMoment(unit, 0, exp_avg);
  if (status.ok()) status = parts_.components.WriteMoment(unit, 1, exp_avg_sq);
  ForgetTraffic();
  return status;
}

std::pair<size_t, size_t> EngineState::StoredRange(int unit) const {
  const UnitState& state = parts_.units[unit];
  const ShardRange own = OwnedRange(state, parts_.communicator->rank());
  const bool full_params = parts_.components.param_part_elements(unit) == state.padded_elements;
  if (full_params || !parts_.components.sharded_state()) return {0, state.padded_elements};
  return {own.begin, own.end};
}

Status EngineState::WriteUnit(int unit, const UnitFill& fill) {
  if (Packed(unit)) return WritePacked(unit, fill);
  const auto [begin, end] = StoredRange(unit);
  if (float* target = WriteTargets(unit).master) {  // straight into the master, once idle
    RETURN_IF_ERROR(parts_.sync());
    RETURN_IF_ERROR(fill(begin, end, target));
    return WriteStoredValues(unit, target);
  }
  std::vector<float> values(end - begin);
  RETURN_IF_ERROR(fill(begin, end, values.data()));
  return WriteStoredValues(unit, values.data());
}

UnitWriteTargets EngineState::WriteTargets(int unit) const {
  const Parts& e = parts_;
  const UnitState& state = e.units[unit];
  const auto [begin, end] = StoredRange(unit);
  const ShardRange own = OwnedRange(state, e.communicator->rank());
  UnitWriteTargets targets;
  if (Packed(unit)) return targets;  // quantized from fp32 values: WriteUnit
  // The master: trainable, in memory the host addresses, holding exactly the range (not
  // where it is a shard of the range: stages 1-2 on several ranks).
  if (e.model->units()[unit].trainable() && !state.master.empty() &&
      e.device->InHostMemory(state.master.tier())) {
    const size_t master_begin = e.components.sharded_state() ? own.begin : 0;
    targets.master_straight =
        master_begin == begin && state.master.bytes() == (end - begin) * sizeof(float);
  }
  if (targets.master_straight && e.device->HostAccessible(state.master.tier())) {
    targets.master = state.master.as<float>();
  }
  // The bf16 params: a bf16 engine whose param part is exactly the range; straight where
  // that part sits in memory the host addresses (not on NVMe).
  const size_t param_elements = e.components.param_part_elements(unit);
  const bool full = param_elements == state.padded_elements;
  const size_t param_begin = full ? 0 : own.begin;
  targets.takes_bf16_params = e.config.dtype == DType::kBF16 && param_begin == begin &&
                              param_elements == end - begin;
  void* part = e.components.param_part(unit);
  if (targets.takes_bf16_params && part != nullptr) {
    const std::optional<Tier> tier = e.device->TierOf(part);
    targets.params_straight = tier.has_value() && e.device->InHostMemory(*tier);
  }
  if (targets.params_straight && !e.device->dry_run()) targets.params = static_cast<bf16*>(part);
  targets.params_share_master = part != nullptr && part == state.master.data();
  return targets;
}

Status EngineState::WriteStoredValues(int unit, const float* values, const bf16* params) {
  if (Packed(unit)) {
    return absl::InternalError(absl::StrCat("unit ", unit, " is stored quantized: WriteUnit"));
  }
  const auto [begin, end] = StoredRange(unit);
  if (params != nullptr && !WriteTargets(unit).takes_bf16_params) {
    return absl::InternalError(absl::StrCat(
        "unit ", unit, ": bf16 params given, but the engine does not take them as they are"));
  }
  if (values == nullptr && (params == nullptr || parts_.model->units()[unit].trainable())) {
    return absl::InternalError(absl::StrCat("unit ", unit, ": no values to store"));
  }
  Status status = WriteState(unit, {values, nullptr, nullptr, begin, end}, params);
  ForgetTraffic();
  return status;
}

Status EngineState::WriteState(int unit, const UnitStateView& view, const bf16* params,
                               const float* full_master) {
  UnitState& state = parts_.units[unit];
  const auto [need_begin, need_end] = full_master != nullptr ? StateRange(unit) : StoredRange(unit);
  if (view.begin > need_begin || view.end < need_end) {
    return absl::InternalError(absl::StrCat("unit ", unit, ": state given for [", view.begin, ", ",
                                            view.end, "), this rank stores [", need_begin, ", ",
                                            need_end, ")"));
  }
  RETURN_IF_ERROR(parts_.sync());
  const int rank = parts_.communicator->rank();
  const ShardRange own = OwnedRange(state, rank);
  // The optimizer state (full or own shard); moments not given start at zero. A frozen
  // unit has none: its params alone.
  if (parts_.model->units()[unit].trainable()) {
    const size_t offset = (parts_.components.sharded_state() ? own.begin : 0) - view.begin;
    auto part = [offset](const float* array) {
      return array == nullptr ? nullptr : array + offset;
    };
    RETURN_IF_ERROR(parts_.components.WriteOptimizerState(unit, part(view.master), part(view.exp_avg),
                                                     part(view.exp_avg_sq)));
  }
  // bf16 params given as they are: in place already, or put in their home.
  if (params != nullptr) {
    if (params == WriteTargets(unit).params) return absl::OkStatus();
    return parts_.components.WriteParams(unit, params);
  }
  // The params this rank stores (the full unit, or its shard at stage 3), cast from fp32 on
  // the host (round to nearest even, as the device's cast), then put in place by their
  // home; fp32 params go to their home as they are.
  const size_t param_elements = parts_.components.param_part_elements(unit);
  const bool full = param_elements == state.padded_elements;
  const float* param_src = full_master != nullptr
                               ? full_master + (full ? 0 : own.begin)
                               : view.master + ((full ? 0 : own.begin) - view.begin);
  if (parts_.config.dtype == DType::kF32) {  // nothing more where they are the master itself
    return WriteTargets(unit).params_share_master
               ? absl::OkStatus()
               : parts_.components.WriteParams(unit, param_src);
  }
  if (parts_.device->TierOf(param_src) == Tier::kDevice) {
    // The master itself, written in place on a CPU device (WriteTargets): host kernels
    // may not read the device tier, so the device's cast writes the part in place (an
    // optimizer on the device has its params there too).
    void* part = parts_.components.param_part(unit);
    if (part == nullptr || parts_.device->TierOf(part) != Tier::kDevice) {
      return absl::InternalError(absl::StrCat("unit ", unit, ": a master on the device with "
                                              "params off it"));
    }
    RETURN_IF_ERROR(parts_.ops->CastFromFloat(compute(), part, param_src, param_elements));
    return compute().Synchronize();
  }
  // A dry run (a plan) touches no memory: the params' home counts the write of the source's
  // (untouched) pages as it is.
  if (parts_.device->dry_run()) return parts_.components.WriteParams(unit, param_src);
  const size_t bytes = param_elements * DTypeBytes(parts_.config.dtype);
  // Reused from unit to unit: a fresh vector would zero and fault in its pages every time.
  if (store_host_.size() < bytes) store_host_.resize(bytes);
  RETURN_IF_ERROR(parts_.host_ops->CastFromFloat(host(), store_host_.data(), param_src, param_elements));
  RETURN_IF_ERROR(host().Synchronize());
  return parts_.components.WriteParams(unit, store_host_.data());
}

}  // namespace strata
