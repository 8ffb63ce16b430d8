// LoRA adapters; see lora.h.
#include "models/common/lora.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kernels/dropout_mask.h"

namespace strata {

StatusOr<std::vector<int>> ResolveLoraTargets(const std::string& text,
                                              const std::vector<LoraTargetSpec>& specs,
                                              const std::string& defaults) {
  const std::string& list = text.empty() ? defaults : text;
  std::vector<bool> chosen(specs.size(), false);
  for (absl::string_view raw : absl::StrSplit(list, ',')) {
    const std::string name(absl::StripAsciiWhitespace(raw));
    if (name.empty()) continue;
    bool known = false;
    for (size_t t = 0; t < specs.size(); ++t) {
      const LoraTargetSpec& spec = specs[t];
      const bool match = name == "all" || name == spec.name ||
                         std::find(spec.aliases.begin(), spec.aliases.end(), name) !=
                             spec.aliases.end();
      if (match) chosen[t] = known = true;
    }
    if (!known) {
      std::vector<std::string> names;
      for (const LoraTargetSpec& spec : specs) {
        std::string entry = spec.name;
        if (!spec.aliases.empty()) {
          absl::StrAppend(&entry, " (", absl::StrJoin(spec.aliases, ", "), ")");
        }
        names.push_back(entry);
      }
      return absl::InvalidArgumentError(
          absl::StrCat("lora.targets: '", name, "' is no projection of this model family; ",
                       "known: ", absl::StrJoin(names, ", "), ", or all"));
    }
  }
  std::vector<int> out;
  for (size_t t = 0; t < specs.size(); ++t) {
    if (chosen[t]) out.push_back(static_cast<int>(t));
  }
  if (out.empty()) return absl::InvalidArgumentError("lora.targets names no projection");
  return out;
}

LoraAdapters::LoraAdapters(const LoraConfig& config, std::vector<LoraTargetSpec> specs,
                           std::vector<int> targets, int layers, DType dtype,
                           std::vector<UnitLayout>* units)
    : rank_(config.rank), scale_(config.alpha / static_cast<float>(config.rank)),
      dropout_(config.dropout), dtype_(dtype), specs_(std::move(specs)), targets_(std::move(targets)),
      tensor_of_(specs_.size(), -1) {
  for (UnitLayout& unit : *units) unit.set_trainable(false);
  first_unit_ = static_cast<int>(units->size());
  for (int l = 0; l < layers; ++l) {
    UnitLayout adapters("block " + std::to_string(l) + " lora");
    for (int t : targets_) {
      const LoraTargetSpec& spec = specs_[t];
      const float std_a = 1.0f / std::sqrt(3.0f * spec.in);
      const int a = adapters.Add(spec.name + ".lora_A", {rank_, spec.in}, true,
                                 InitKind::kNormal, std_a);
      adapters.Add(spec.name + ".lora_B", {spec.n, rank_}, true, InitKind::kZeros);
      tensor_of_[t] = a;
      max_n_ = std::max(max_n_, spec.n);
      max_in_ = std::max(max_in_, spec.in);
    }
    if (l == 0) {
      for (const TensorSpec& tensor : adapters.tensors()) offsets_.push_back(tensor.offset);
    }
    units->push_back(std::move(adapters));
  }
}

bool LoraAdapters::has(int target) const {
  return active() && target >= 0 && target < static_cast<int>(tensor_of_.size()) &&
         tensor_of_[target] >= 0;
}

size_t LoraAdapters::Offset(int target, bool b) const {
  return offsets_[tensor_of_[target] + (b ? 1 : 0)] * DTypeBytes(dtype_);
}

const void* LoraAdapters::A(const StepContext& ctx, int layer, int target) const {
  return static_cast<const char*>(ctx.params[unit(layer)]) + Offset(target, false);
}

const void* LoraAdapters::B(const StepContext& ctx, int layer, int target) const {
  return static_cast<const char*>(ctx.params[unit(layer)]) + Offset(target, true);
}

void* LoraAdapters::Grad(const StepContext& ctx, int layer, int target, bool b) const {
  return static_cast<char*>(ctx.grads[unit(layer)]) + Offset(target, b);
}

Status LoraAdapters::Prepare(Device& device, int rows, int layers) {
  if (!active()) return absl::OkStatus();
  rows_ = rows;
  const size_t bytes = DTypeBytes(dtype_);
  const size_t per = static_cast<size_t>(rows) * rank_;
  ASSIGN_OR_RETURN(h_, device.Allocate(Tier::kDevice, StateKind::kActivations,
                                       per * targets_.size() * layers * bytes,
                                       "activation lora A x"));
  ASSIGN_OR_RETURN(tmp_, device.Allocate(Tier::kDevice, StateKind::kActivations,
                                         static_cast<size_t>(rows) * max_n_ * bytes,
                                         "activation lora scratch"));
  ASSIGN_OR_RETURN(dh_, device.Allocate(Tier::kDevice, StateKind::kActivations, per * bytes,
                                        "activation lora d(A x)"));
  if (dropout_ > 0.0f) {
    const size_t in_bytes = static_cast<size_t>(rows) * max_in_ * bytes;
    ASSIGN_OR_RETURN(xd_, device.Allocate(Tier::kDevice, StateKind::kActivations, in_bytes,
                                          "activation lora dropped-out input"));
    ASSIGN_OR_RETURN(dxd_, device.Allocate(Tier::kDevice, StateKind::kActivations, in_bytes,
                                           "activation lora d(dropped-out input)"));
  }
  return absl::OkStatus();
}

Status LoraAdapters::PrepareDecode(Device& device, int rows) {
  if (!active()) return absl::OkStatus();
  const size_t bytes = DTypeBytes(dtype_) * static_cast<size_t>(rows);
  decode_rows_ = rows;
  ASSIGN_OR_RETURN(dec_h_, device.Allocate(Tier::kDevice, StateKind::kActivations,
                                           rank_ * bytes, "decode lora A x"));
  ASSIGN_OR_RETURN(dec_tmp_, device.Allocate(Tier::kDevice, StateKind::kActivations,
                                             max_n_ * bytes, "decode lora scratch"));
  return absl::OkStatus();
}

void* LoraAdapters::KeptAx(int layer, int target) {
  const size_t slot = static_cast<size_t>(layer) * targets_.size() +
                      (std::find(targets_.begin(), targets_.end(), target) - targets_.begin());
  return static_cast<char*>(h_.data()) + slot * rows_ * rank_ * DTypeBytes(dtype_);
}

uint64_t LoraAdapters::MaskKey(const StepContext& ctx, int layer, int target) const {
  const uint64_t x =
      ctx.dropout_key ^ (static_cast<uint64_t>(layer) << 32 | static_cast<uint32_t>(target));
  return DropoutMix(x + kDropoutGamma);
}

StatusOr<const void*> LoraAdapters::DroppedInput(const StepContext& ctx, int layer, int target,
                                                 const void* x, int rows) {
  if (dropout_ <= 0.0f || ctx.dropout_key == 0) return x;
  RETURN_IF_ERROR(ctx.ops->Dropout(*ctx.stream, xd_.data(), x, rows, specs_[target].in,
                                   ctx.seq_len, ctx.first_row, dropout_,
                                   MaskKey(ctx, layer, target), /*accumulate=*/false));
  return static_cast<const void*>(xd_.data());
}

Status LoraAdapters::Forward(const StepContext& ctx, int layer, int target, const void* x,
                             void* out, int rows, bool decode) {
  if (!has(target)) return absl::OkStatus();
  const LoraTargetSpec& spec = specs_[target];
  void* h = decode ? dec_h_.data() : nullptr;
  if (decode && rows > decode_rows_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lora: ", rows, " decode rows, the scratch was prepared for ", decode_rows_));
  }
  if (!decode) {
    if (rows != rows_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lora: ", rows, " rows, the activations were prepared for ", rows_));
    }
    h = KeptAx(layer, target);
  }
  void* tmp = decode ? dec_tmp_.data() : tmp_.data();
  Ops& ops = *ctx.ops;
  Stream& s = *ctx.stream;
  if (!decode) {
    ASSIGN_OR_RETURN(x, DroppedInput(ctx, layer, target, x, rows));
  }
  RETURN_IF_ERROR(ops.MatmulForward(s, h, x, A(ctx, layer, target), nullptr, rows, spec.in, rank_));
  RETURN_IF_ERROR(ops.MatmulForward(s, tmp, h, B(ctx, layer, target), nullptr, rows, rank_, spec.n));
  return ops.AddScaledColumns(s, out, spec.out_cols, spec.col, tmp, rows, spec.n, scale_);
}

Status LoraAdapters::Backward(const StepContext& ctx, int layer, int target, const void* x,
                              const void* dout, void* dx, int rows) {
  if (!has(target)) return absl::OkStatus();
  const LoraTargetSpec& spec = specs_[target];
  const size_t bytes = DTypeBytes(dtype_);
  const void* h = KeptAx(layer, target);
  Ops& ops = *ctx.ops;
  Stream& s = *ctx.stream;
  // d(B h) = scale * dout's columns; then dB += d(B h)^T h, dh = d(B h) B; dA += dh^T x,
  // dx += dh A.
  RETURN_IF_ERROR(ops.ScaledColumns(s, tmp_.data(), dout, spec.out_cols, spec.col, rows, spec.n,
                                    scale_));
  RETURN_IF_ERROR(ctx.device->MemsetAsync(dh_.data(), 0, static_cast<size_t>(rows) * rank_ * bytes, s));
  RETURN_IF_ERROR(ops.MatmulBackward(s, dh_.data(), Grad(ctx, layer, target, true), nullptr,
                                     tmp_.data(), h, B(ctx, layer, target), rows, rank_, spec.n));
  ASSIGN_OR_RETURN(const void* xd, DroppedInput(ctx, layer, target, x, rows));
  if (xd == x) {
    return ops.MatmulBackward(s, dx, Grad(ctx, layer, target, false), nullptr, dh_.data(), x,
                              A(ctx, layer, target), rows, spec.in, rank_);
  }
  // Dropout: the same mask again (drawn from the same key), dA from the dropped-out input,
  // and the input's gradient through the mask.
  RETURN_IF_ERROR(ctx.device->MemsetAsync(
      dxd_.data(), 0, static_cast<size_t>(rows) * spec.in * bytes, s));
  RETURN_IF_ERROR(ops.MatmulBackward(s, dxd_.data(), Grad(ctx, layer, target, false), nullptr,
                                     dh_.data(), xd, A(ctx, layer, target), rows, spec.in,
                                     rank_));
  return ops.Dropout(s, dx, dxd_.data(), rows, spec.in, ctx.seq_len, ctx.first_row, dropout_,
                     MaskKey(ctx, layer, target), /*accumulate=*/true);
}

}  // namespace strata
