// The ZeRO component factory; see zero_components.h.
#include "runtime/zero_components.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/gradient_reducers.h"
#include "runtime/optimizer_steppers.h"
#include "runtime/prefetch_executor.h"
#include "tiers/state_blocks.h"
#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// Stages 0-2: every rank holds the full parameters.
class ReplicatedGatherer : public ParamGatherer {
 public:
  ReplicatedGatherer(const ZeroContext& ctx, ParamHome* params,
                     std::shared_ptr<FreshParams> fresh)
      : ctx_(ctx), params_(params), fresh_(std::move(fresh)) {}
  StatusOr<const void*> Acquire(int, int unit) override {
    RETURN_IF_ERROR(fresh_->WaitOn(*ctx_.device, *ctx_.compute, unit));
    return params_->part(unit);
  }
  Status Release(int, int) override { return absl::OkStatus(); }
  Status EndMicroBatch() override { return absl::OkStatus(); }
  GatherStats stats() const override { return {}; }

 private:
  ZeroContext ctx_;
  ParamHome* params_;
  std::shared_ptr<FreshParams> fresh_;
};

// What each stage keeps of a unit.
struct StageLayout {
  bool full_params;       // every rank keeps the full params (else its shard)
  bool persistent_grads;  // full grad buffer lives for the whole run
  bool sharded_state;     // grad_accum, master, m, v hold the own shard only
};

StageLayout LayoutOf(int stage) {
  const StageLayout layouts[4] = {
      {true, true, false},   // 0: everything replicated
      {true, true, true},    // 1: optimizer state sharded
      {true, false, true},   // 2: + gradients reduce-scattered per unit, full grads freed
      {false, false, true},  // 3: + params sharded between uses
  };
  return layouts[stage];
}

// The memory tier a kind of state is worked on in: nvme state goes through host buffers.
Tier MemoryTier(StateTier tier) {
  return tier == StateTier::kDevice ? Tier::kDevice : Tier::kHost;
}

// Bytes of one Adam moment's extent of `chunk` of `unit`'s shard: fp32, or with 8-bit states
// the chunk's stored form (tiers/state_blocks.h). Chunks are multiples of 2048 elements and
// shards start on block boundaries, so a chunk is a block-aligned slice of the shard's state
// range; the optimizer home builds the same runs per chunk.
uint64_t MomentExtentBytes(const ZeroContext& ctx, OptimizerStates states, size_t unit,
                           const NvmeChunk& chunk) {
  if (states != OptimizerStates::kInt8) return (chunk.end - chunk.begin) * 4;
  // The optimizer on nvme shards its state (stage >= 1): the rank's shard.
  const size_t shard_begin = OwnedRange((*ctx.units)[unit], ctx.communicator->rank()).begin;
  return SectionsOf(StateRuns((*ctx.layouts)[unit],
                              {shard_begin + chunk.begin, shard_begin + chunk.end}))
      .bytes();
}

// The rank's NVMe tiers: per chunk of each unit's shard, the optimizer state extents (fp32
// master; moments in `states`' form; with `grads`, the fp32 gradient sums too), or
// (`params`) the param shard (compute dtype).
StatusOr<std::unique_ptr<NvmeTier>> CreateNvmeTier(
    const NvmeSettings& nvme, const ZeroContext& ctx, bool params, bool grads,
    OptimizerStates states, const std::vector<std::vector<NvmeChunk>>& chunks) {
  NvmeStoreOptions store;
  store.dir = nvme.dir;
  store.rank = ctx.world_rank;
  store.allow_memory_fs = nvme.allow_memory_fs;
  store.dry_run = ctx.device->dry_run();  // a plan's dry run touches no disk
  store.engine.engine = nvme.engine;
  store.engine.queue_depth = nvme.queue_depth;
  store.fault = nvme.fault;
  store.engine.trace = ctx.device->trace();
  store.engine.trace_name = params ? "nvme params" : "nvme optimizer";
  std::vector<ExtentSpec> extents;
  for (size_t u = 0; u < ctx.layouts->size(); ++u) {
    const UnitLayout& unit = (*ctx.layouts)[u];
    for (size_t k = 0; k < chunks[u].size(); ++k) {
      const NvmeChunk& chunk = chunks[u][k];
      const std::string name = absl::StrCat(unit.name(), " chunk ", k);
      const uint64_t n = chunk.end - chunk.begin;
      if (params) {
        extents.push_back({chunk.id, name, ExtentKind::kParams, n * DTypeBytes(ctx.dtype)});
      } else {
        extents.push_back({chunk.id, name, ExtentKind::kMaster, n * 4});
        const uint64_t moment_bytes = MomentExtentBytes(ctx, states, u, chunk);
        extents.push_back({chunk.id, name, ExtentKind::kExpAvg, moment_bytes});
        extents.push_back({chunk.id, name, ExtentKind::kExpAvgSq, moment_bytes});
        if (grads) extents.push_back({chunk.id, name, ExtentKind::kGrads, n * 4});
      }
    }
  }
  return NvmeTier::Create(store, extents);
}

// Every unit's gradient and optimizer state (the params are the ParamHome's), in the
// placement's tiers; nvme state has no buffers here (its homes hold a few host buffers).
Status AllocateState(const ZeroContext& ctx, const StageLayout& layout,
                     const Placement& placement) {
  const HomeContext& home = ctx;
  const size_t element_bytes = DTypeBytes(ctx.dtype);
  const Tier grads = MemoryTier(placement.grads);
  const Tier optimizer = MemoryTier(placement.optimizer);
  for (size_t u = 0; u < ctx.layouts->size(); ++u) {
    if (!(*ctx.layouts)[u].trainable()) continue;  // frozen: its params alone
    UnitState& state = (*ctx.units)[u];
    const size_t n_state = layout.sharded_state ? state.shard_elements : state.padded_elements;
    const std::string& name = (*ctx.layouts)[u].name();
    if (layout.persistent_grads) {
      ASSIGN_OR_RETURN(state.grads, AllocateZeroedIn(home, Tier::kDevice, StateKind::kGrads,
                                                     state.padded_elements * element_bytes,
                                                     name + " grads"));
    }
    if (placement.grads != StateTier::kNvme) {
      ASSIGN_OR_RETURN(state.grad_accum,
                       AllocateZeroedIn(home, grads, StateKind::kGrads, n_state * 4,
                                        name + " fp32 grad accumulator"));
    }
    // 8-bit states: the runs of the state range, in every tier (an nvme home's chunks
    // follow them too).
    if (placement.states == OptimizerStates::kInt8) {
      const size_t begin =
          layout.sharded_state ? OwnedRange(state, ctx.communicator->rank()).begin : 0;
      state.state_runs = StateRuns((*ctx.layouts)[u], {begin, begin + n_state});
    }
    if (placement.optimizer != StateTier::kNvme) {
      ASSIGN_OR_RETURN(state.master, AllocateZeroedIn(home, optimizer, StateKind::kOptimizer,
                                                      n_state * 4, name + " fp32 master"));
      // 8-bit states: the fp32 moments of the fp32 runs alone, and the quantized runs' codes
      // and absmaxes (fresh: the codes of 0.0, m's 127).
      size_t fp32_moments = n_state;
      if (!state.state_runs.empty()) {
        const StateRunElements count = CountStateRuns(state.state_runs);
        fp32_moments = count.fp32;
        const size_t blocks = count.quantized / kAdamStateBlock;
        if (count.quantized > 0) {
          ASSIGN_OR_RETURN(state.m_codes,
                           AllocateZeroedIn(home, optimizer, StateKind::kOptimizer,
                                            count.quantized, name + " exp_avg codes"));
          ASSIGN_OR_RETURN(state.v_codes,
                           AllocateZeroedIn(home, optimizer, StateKind::kOptimizer,
                                            count.quantized, name + " exp_avg_sq codes"));
          ASSIGN_OR_RETURN(state.m_absmax,
                           AllocateZeroedIn(home, optimizer, StateKind::kOptimizer, blocks * 4,
                                            name + " exp_avg absmax"));
          ASSIGN_OR_RETURN(state.v_absmax,
                           AllocateZeroedIn(home, optimizer, StateKind::kOptimizer, blocks * 4,
                                            name + " exp_avg_sq absmax"));
          // Fresh m codes are the signed map's 0.0 (as AllocateZeroedIn, a dry run's host
          // tier is left to the device's memset).
          if (optimizer == Tier::kHost && ctx.device->HostAccessible(Tier::kHost)) {
            std::memset(state.m_codes.data(), 127, count.quantized);
          } else {
            RETURN_IF_ERROR(ctx.device->MemsetAsync(state.m_codes.data(), 127, count.quantized,
                                                    *ctx.compute));
          }
        }
      }
      if (fp32_moments > 0) {
        ASSIGN_OR_RETURN(state.exp_avg,
                         AllocateZeroedIn(home, optimizer, StateKind::kOptimizer,
                                          fp32_moments * 4, name + " exp_avg"));
        ASSIGN_OR_RETURN(state.exp_avg_sq,
                         AllocateZeroedIn(home, optimizer, StateKind::kOptimizer,
                                          fp32_moments * 4, name + " exp_avg_sq"));
      }
    }
    // Host staging of the offloaded optimizer.
    if (placement.grads == StateTier::kHost) {
      ASSIGN_OR_RETURN(state.grad_landing,
                       AllocateZeroedIn(home, Tier::kHost, StateKind::kGrads,
                                        n_state * element_bytes, name + " grad landing"));
    }
    if (placement.optimizer == StateTier::kHost) {
      if (placement.grads == StateTier::kDevice) {
        ASSIGN_OR_RETURN(state.grad_staging,
                         AllocateZeroedIn(home, Tier::kHost, StateKind::kGrads, n_state * 4,
                                          name + " fp32 grad staging"));
      }
      if (placement.params == StateTier::kDevice) {
        ASSIGN_OR_RETURN(state.param_staging,
                         AllocateZeroedIn(home, Tier::kHost, StateKind::kParams,
                                          n_state * element_bytes, name + " param staging"));
      }
    }
  }
  return ctx.compute->Synchronize();
}

}  // namespace

Status ZeroComponents::ReadOptimizerState(int unit, float* master, float* exp_avg,
                                          float* exp_avg_sq) {
  return optimizer_home_->ReadState(unit, master, exp_avg, exp_avg_sq);
}

Status ZeroComponents::WriteOptimizerState(int unit, const float* master, const float* exp_avg,
                                           const float* exp_avg_sq) {
  return optimizer_home_->WriteState(unit, master, exp_avg, exp_avg_sq);
}

NvmeTraffic ZeroComponents::traffic() const {
  NvmeTraffic traffic;
  if (nvme_ != nullptr) {
    traffic.read_bytes += nvme_->bytes_read();
    traffic.written_bytes += nvme_->bytes_written();
    traffic.busy_ms = nvme_->busy_ms();
  }
  traffic.param_read_bytes = param_home_->bytes_read();
  traffic.param_written_bytes = param_home_->bytes_written();
  traffic.read_bytes += traffic.param_read_bytes;
  traffic.written_bytes += traffic.param_written_bytes;
  traffic.param_busy_ms = param_home_->busy_ms();
  return traffic;
}

Status ZeroComponents::Assemble(const EngineConfig& config, const ZeroContext& context,
                                ZeroComponents& components) {
  const Placement& placement = config.placement;
  const NvmeSettings& settings = config.nvme;
  const int stage = placement.stage;
  const StageLayout layout = LayoutOf(stage);
  const int world = context.communicator->world_size();
  context.units->clear();
  context.units->resize(context.layouts->size());
  // Per unit: its shard, where it is trainable (the optimizer's and gradients' tiers keep
  // those alone), and its param part.
  std::vector<size_t> trainable_shards, frozen_shards, parts;
  std::vector<bool> frozen;
  for (size_t u = 0; u < context.layouts->size(); ++u) {
    UnitState& state = (*context.units)[u];
    const UnitLayout& unit = (*context.layouts)[u];
    state.padded_elements = unit.PaddedElements(world);
    state.shard_elements = unit.ShardElements(world);
    frozen.push_back(!unit.trainable());
    trainable_shards.push_back(unit.trainable() ? state.shard_elements : 0);
    frozen_shards.push_back(unit.trainable() ? 0 : state.shard_elements);
    parts.push_back(layout.full_params ? state.padded_elements : state.shard_elements);
  }
  const HomeContext& home = context;
  components.sharded_state_ = layout.sharded_state;

  // The NVMe tiers: the optimizer's (and the gradient sums'), then the params' own. Chunk
  // ids of trainable units are the same in both; a frozen base's follow.
  const size_t chunk_elements = settings.chunk_bytes / 4;
  std::vector<std::vector<NvmeChunk>> chunks = NvmeChunks(trainable_shards, chunk_elements);
  if (placement.optimizer == StateTier::kNvme) {
    ASSIGN_OR_RETURN(components.nvme_,
                     CreateNvmeTier(settings, context, /*params=*/false,
                                    placement.grads == StateTier::kNvme, placement.states,
                                    chunks));
  }
  int trainable_chunks = 0;
  for (const auto& unit_chunks : chunks) trainable_chunks += unit_chunks.size();
  const std::vector<std::vector<NvmeChunk>> frozen_chunks =
      NvmeChunks(frozen_shards, chunk_elements, trainable_chunks);
  RETURN_IF_ERROR(AllocateState(context, layout, placement));
  // An fp32 engine's params of a trainable unit are its master where both hold the whole
  // unit in the device tier (stage 0, the optimizer on the device: AdamW updates it in
  // place): one buffer, not a second copy of the same values.
  std::vector<void*> shared(context.layouts->size(), nullptr);
  if (config.dtype == DType::kF32 && stage == 0 &&
      placement.optimizer == StateTier::kDevice && placement.params == StateTier::kDevice) {
    for (size_t u = 0; u < shared.size(); ++u) {
      const UnitState& state = (*context.units)[u];
      if (!frozen[u] && state.master.bytes() == parts[u] * sizeof(float)) {
        shared[u] = state.master.data();
      }
    }
  }
  // The param home of the units `members` says (one home for all, or one per group).
  auto make_param_home = [&](StateTier tier, auto members) -> StatusOr<std::unique_ptr<ParamHome>> {
    if (tier == StateTier::kNvme) {
      std::vector<std::vector<NvmeChunk>> mine(chunks.size());
      for (size_t u = 0; u < mine.size(); ++u) {
        if (members(u)) mine[u] = frozen[u] ? frozen_chunks[u] : chunks[u];
      }
      ASSIGN_OR_RETURN(std::unique_ptr<NvmeTier> nvme,
                       CreateNvmeTier(settings, context, /*params=*/true, /*grads=*/false,
                                      placement.states, mine));
      return ParamHome::CreateNvme(home, std::move(nvme), std::move(mine),
                                   settings.read_ahead_units);
    }
    std::vector<size_t> mine(parts.size(), 0);
    for (size_t u = 0; u < mine.size(); ++u) {
      if (members(u)) mine[u] = parts[u];
    }
    return ParamHome::CreateResident(home, MemoryTier(tier), mine,
                                     tier == placement.params ? shared : std::vector<void*>{});
  };
  if (!placement.frozen || placement.frozen_params == placement.params) {
    ASSIGN_OR_RETURN(components.param_home_,
                     make_param_home(placement.params, [](size_t) { return true; }));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<ParamHome> trainable,
                     make_param_home(placement.params, [&](size_t u) { return !frozen[u]; }));
    ASSIGN_OR_RETURN(std::unique_ptr<ParamHome> base,
                     make_param_home(placement.frozen_params, [&](size_t u) { return frozen[u]; }));
    components.param_home_ =
        ParamHome::CreateSplit(std::move(trainable), std::move(base), frozen);
  }

  // The homes of the sums and the optimizer state; two NVMe homes are linked so that final
  // sums can go to the optimizer in memory.
  if (placement.grads == StateTier::kNvme) {
    ASSIGN_OR_RETURN(components.grad_home_,
                     GradHome::CreateNvme(home, components.nvme_.get(), chunks,
                                          settings.grad_buffers));
  } else {
    ASSIGN_OR_RETURN(components.grad_home_,
                     GradHome::Create(home, MemoryTier(placement.grads)));
  }
  ParamHome* param_home = components.param_home_.get();
  GradHome* grad_home = components.grad_home_.get();
  if (placement.optimizer == StateTier::kNvme) {
    components.hand_over_ = grad_home->hand_over();
    ASSIGN_OR_RETURN(components.optimizer_home_,
                     OptimizerHome::CreateNvme(home, grad_home, components.nvme_.get(), chunks,
                                               param_home, settings.optimizer_buffers,
                                               components.hand_over_));
  } else {
    ASSIGN_OR_RETURN(components.optimizer_home_,
                     OptimizerHome::Create(home, MemoryTier(placement.optimizer), grad_home,
                                           param_home));
  }

  // The components of the stage.
  auto fresh = std::make_shared<FreshParams>();
  fresh->pending.assign(context.units->size(), nullptr);
  if (placement.sharded_params()) {
    ASSIGN_OR_RETURN(components.gatherer_, CreatePrefetchExecutor(context, param_home, fresh));
  } else {
    components.gatherer_ = std::make_unique<ReplicatedGatherer>(context, param_home, fresh);
  }
  ASSIGN_OR_RETURN(components.reducer_, CreateGradientReducer(context, grad_home, stage));
  ASSIGN_OR_RETURN(components.stepper_,
                   CreateOptimizerStepper(context, components.optimizer_home_.get(), param_home,
                                          fresh, stage));
  return absl::OkStatus();
}

StatusOr<ZeroComponents> MakeZeroComponents(const EngineConfig& config,
                                            const ZeroContext& context) {
  if (context.communicator == nullptr || context.comm == nullptr || context.copy == nullptr ||
      context.host == nullptr || context.host_ops == nullptr) {
    return absl::InvalidArgumentError(
        "the ZeRO components need a communicator, comm/copy/host streams and host kernels");
  }
  ZeroComponents components;
  Status status = ZeroComponents::Assemble(config, context, components);
  if (!status.ok()) {
    // State allocated so far may still be zeroed on the compute stream: that must be done
    // before the partial components (and their buffers) go.
    status.Update(context.compute->Synchronize());
    return status;
  }
  return components;
}

}  // namespace strata
