// ZeRO stage 0 components (replicated state, one rank) and the factory; see
// zero_components.h. All state lives on the device tier.
#include "runtime/zero_components.h"

namespace strata {
namespace {

StatusOr<Buffer> AllocateZeroed(const ZeroContext& ctx, StateKind kind, size_t bytes,
                                const std::string& what) {
  ASSIGN_OR_RETURN(Buffer buffer, ctx.device->Allocate(Tier::kDevice, kind, bytes, what));
  RETURN_IF_ERROR(ctx.device->MemsetAsync(buffer.data(), 0, bytes, *ctx.compute));
  return buffer;
}

class ReplicatedGatherer : public ParamGatherer {
 public:
  explicit ReplicatedGatherer(const ZeroContext& ctx) : ctx_(ctx) {}
  StatusOr<const void*> Acquire(int unit) override { return (*ctx_.units)[unit].params.data(); }
  Status Release(int) override { return absl::OkStatus(); }

 private:
  ZeroContext ctx_;
};

class LocalReducer : public GradientReducer {
 public:
  explicit LocalReducer(const ZeroContext& ctx) : ctx_(ctx) {}
  Status Reduce(int unit) override {
    UnitState& state = (*ctx_.units)[unit];
    RETURN_IF_ERROR(ctx_.ops->AccumulateToFloat(*ctx_.compute, state.grad_accum.as<float>(),
                                                state.grads.data(), state.padded_elements));
    return ctx_.device->MemsetAsync(state.grads.data(), 0, state.grads.bytes(), *ctx_.compute);
  }
  Status SumSquares(int unit, float* result) override {
    UnitState& state = (*ctx_.units)[unit];
    return ctx_.ops->SumSquares(*ctx_.compute, result, state.grad_accum.as<float>(),
                                state.padded_elements);
  }
  Status Zero(int unit) override {
    UnitState& state = (*ctx_.units)[unit];
    return ctx_.device->MemsetAsync(state.grad_accum.data(), 0, state.grad_accum.bytes(),
                                    *ctx_.compute);
  }

 private:
  ZeroContext ctx_;
};

// Steps each tensor of a unit separately so weight decay applies to matrices only.
class DeviceAdamStepper : public OptimizerStepper {
 public:
  explicit DeviceAdamStepper(const ZeroContext& ctx) : ctx_(ctx) {}
  Status Step(int unit, const AdamParams& params) override {
    UnitState& state = (*ctx_.units)[unit];
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    for (const TensorSpec& tensor : (*ctx_.layouts)[unit].tensors()) {
      AdamParams tensor_params = params;
      if (!tensor.weight_decay) tensor_params.weight_decay = 0.0f;
      const size_t o = tensor.offset;
      RETURN_IF_ERROR(ctx_.ops->AdamW(
          *ctx_.compute, state.params.as<char>() + o * element_bytes, state.master.as<float>() + o,
          state.grad_accum.as<float>() + o, state.exp_avg.as<float>() + o,
          state.exp_avg_sq.as<float>() + o, tensor.numel, tensor_params));
    }
    return absl::OkStatus();
  }

 private:
  ZeroContext ctx_;
};

Status AllocateReplicatedState(const ZeroContext& ctx) {
  const size_t element_bytes = DTypeBytes(ctx.dtype);
  for (size_t u = 0; u < ctx.layouts->size(); ++u) {
    const UnitLayout& layout = (*ctx.layouts)[u];
    UnitState& state = (*ctx.units)[u];
    const size_t n = layout.PaddedElements(ctx.world_size);
    state.padded_elements = n;
    const std::string name = layout.name();
    ASSIGN_OR_RETURN(state.params, AllocateZeroed(ctx, StateKind::kParams, n * element_bytes,
                                                  name + " params"));
    ASSIGN_OR_RETURN(state.grads, AllocateZeroed(ctx, StateKind::kGrads, n * element_bytes,
                                                 name + " grads"));
    ASSIGN_OR_RETURN(state.grad_accum,
                     AllocateZeroed(ctx, StateKind::kGrads, n * 4, name + " fp32 grad accumulator"));
    ASSIGN_OR_RETURN(state.master,
                     AllocateZeroed(ctx, StateKind::kOptimizer, n * 4, name + " fp32 master"));
    ASSIGN_OR_RETURN(state.exp_avg,
                     AllocateZeroed(ctx, StateKind::kOptimizer, n * 4, name + " exp_avg"));
    ASSIGN_OR_RETURN(state.exp_avg_sq,
                     AllocateZeroed(ctx, StateKind::kOptimizer, n * 4, name + " exp_avg_sq"));
  }
  return ctx.compute->Synchronize();
}

}  // namespace

StatusOr<ZeroComponents> MakeZeroComponents(const Options& options, const ZeroContext& context) {
  if (options.zero.stage != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "zero.stage=", options.zero.stage, " is not implemented yet; this build runs stage 0"));
  }
  if (context.world_size != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "world size ", context.world_size, " needs collectives, which this build lacks"));
  }
  context.units->clear();
  context.units->resize(context.layouts->size());
  RETURN_IF_ERROR(AllocateReplicatedState(context));
  ZeroComponents components;
  components.gatherer = std::make_unique<ReplicatedGatherer>(context);
  components.reducer = std::make_unique<LocalReducer>(context);
  components.stepper = std::make_unique<DeviceAdamStepper>(context);
  return components;
}

}  // namespace strata
