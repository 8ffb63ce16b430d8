// Placement resolution and its legality rules; see placement.h.
#include "runtime/placement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata {

std::vector<std::string> PlacementProblems(const Options& options) {
  const ZeroOptions& zero = options.zero;
  const char* optimizer = OptionName(zero.optimizer_tier);
  const bool cpu_optimizer = zero.optimizer_tier != StateTier::kDevice;
  std::vector<std::string> problems;
  if (cpu_optimizer && zero.stage == 0) {
    problems.push_back(absl::StrCat(
        "zero.optimizer_tier=", optimizer,
        " needs zero.stage >= 1 (the CPU optimizer steps owned shards; at one rank stage 1 "
        "trains exactly like stage 0): set zero.stage=1"));
  }
  if (zero.grad_tier == StateTier::kHost && !cpu_optimizer) {
    problems.push_back(
        "zero.grad_tier=host needs zero.optimizer_tier=host or nvme (an optimizer on the "
        "device reads its gradients on the device): set zero.optimizer_tier=host or "
        "zero.grad_tier=device");
  }
  if (zero.grad_tier == StateTier::kNvme &&
      (zero.optimizer_tier != StateTier::kNvme || zero.stage < 2)) {
    problems.push_back(absl::StrCat(
        "zero.grad_tier=nvme needs zero.optimizer_tier=nvme and zero.stage 2 or 3 (got "
        "zero.optimizer_tier=", optimizer, ", zero.stage=", zero.stage,
        "; the optimizer reads each chunk's gradient sum from the disk with its state): set "
        "them, or zero.grad_tier=host"));
  }
  if (zero.param_tier != StateTier::kDevice && zero.stage != 3) {
    problems.push_back(absl::StrCat(
        "zero.param_tier=", OptionName(zero.param_tier), " needs zero.stage=3 (stage ",
        zero.stage,
        " keeps every unit's full parameters on the device): set zero.stage=3 or "
        "zero.param_tier=device"));
  }
  if (zero.param_tier == StateTier::kHost && !cpu_optimizer) {
    problems.push_back(
        "zero.param_tier=host needs zero.optimizer_tier=host or nvme (the optimizer writes "
        "the updated param shards where it runs): set zero.optimizer_tier=host");
  }
  if (zero.param_tier == StateTier::kNvme && zero.optimizer_tier != StateTier::kNvme) {
    problems.push_back(
        "zero.param_tier=nvme needs zero.optimizer_tier=nvme (the optimizer's write-back "
        "stores the updated param shards): set zero.optimizer_tier=nvme");
  }
  if (zero.param_update == ParamUpdate::kDelayed &&
      (zero.optimizer_tier != StateTier::kHost || zero.grad_tier != StateTier::kHost ||
       zero.param_tier != StateTier::kDevice)) {
    problems.push_back(absl::StrCat(
        "zero.param_update=delayed needs zero.optimizer_tier=host, zero.grad_tier=host and "
        "zero.param_tier=device (got ", optimizer, ", ", OptionName(zero.grad_tier), ", ",
        OptionName(zero.param_tier), "): set those, or zero.param_update=exact"));
  }
  if (zero.shard_group == ShardGroup::kNode && zero.stage == 0) {
    problems.push_back(
        "zero.shard_group=node needs zero.stage >= 1 (stage 0 shards nothing): set "
        "zero.stage=1, 2 or 3, or zero.shard_group=world");
  }
  if (zero.shard_group == ShardGroup::kNode && options.device.backend == BackendKind::kCuda) {
    problems.push_back(
        "zero.shard_group=node needs device.backend=cpu under mpirun (the NCCL communicator "
        "does not split by node yet): set zero.shard_group=world");
  }
  const LoraOptions& lora = options.lora;
  if (lora.base_tier != StateTier::kDevice && !lora.enabled()) {
    problems.push_back(absl::StrCat(
        "lora.base_tier=", OptionName(lora.base_tier),
        " places a frozen LoRA base, but lora.rank is 0 (full training, nothing frozen): set "
        "lora.rank > 0, or zero.param_tier for the params of full training"));
  }
  if (lora.base_dtype != BaseDType::kTrain && !lora.enabled()) {
    problems.push_back(absl::StrCat(
        "lora.base_dtype=", OptionName(lora.base_dtype),
        " quantizes a frozen LoRA base, but lora.rank is 0 (full training, nothing frozen): "
        "set lora.rank > 0, or lora.base_dtype=train"));
  }
  if (lora.base_tier != StateTier::kDevice && zero.stage != 3) {
    problems.push_back(absl::StrCat(
        "lora.base_tier=", OptionName(lora.base_tier), " needs zero.stage=3 (stage ",
        zero.stage,
        " keeps every unit's full parameters on the device; stage 3 gathers the base's "
        "shards ahead of use): set zero.stage=3 or lora.base_tier=device"));
  }
  const bool any_nvme = zero.optimizer_tier == StateTier::kNvme ||
                        zero.grad_tier == StateTier::kNvme ||
                        zero.param_tier == StateTier::kNvme ||
                        (lora.enabled() && lora.base_tier == StateTier::kNvme);
  if (any_nvme && zero.nvme_dir.empty()) {
    problems.push_back(
        "a tier is nvme but zero.nvme_dir is empty: set zero.nvme_dir to a directory on an "
        "SSD (O_DIRECT-capable, not tmpfs)");
  }
  return problems;
}

StatusOr<Placement> ResolvePlacement(const Options& options, int world) {
  std::vector<std::string> problems = PlacementProblems(options);
  if (options.zero.stage < 0 || options.zero.stage > 3) {
    problems.push_back(absl::StrCat("zero.stage=", options.zero.stage,
                                    " does not exist (expected 0, 1, 2 or 3)"));
  }
  if (world < 1) problems.push_back(absl::StrCat("a run needs >= 1 rank, got ", world));
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement cannot run:\n  ", absl::StrJoin(problems, "\n  ")));
  }
  Placement placement;
  placement.stage = options.zero.stage;
  placement.world = world;
  placement.optimizer = options.zero.optimizer_tier;
  placement.grads = options.zero.grad_tier;
  placement.params = placement.sharded_params() ? options.zero.param_tier : StateTier::kDevice;
  placement.frozen = options.lora.enabled();
  placement.frozen_params = placement.frozen && placement.sharded_params()
                                ? options.lora.base_tier
                                : StateTier::kDevice;
  placement.update = options.zero.param_update;
  placement.clipping = options.train.grad_clip > 0.0f;
  placement.states = options.train.optimizer_states;
  placement.early_step =
      placement.cpu_optimizer() && !placement.clipping && !placement.delayed();
  placement.split_tied = placement.early_step && world == 1 &&
                         placement.per_unit_reduction() &&
                         placement.optimizer == StateTier::kHost &&
                         placement.grads == StateTier::kHost &&
                         placement.params == StateTier::kDevice;
  placement.nvme_handover = placement.early_step && placement.per_unit_reduction() &&
                            placement.grads == StateTier::kNvme;
  return placement;
}

}  // namespace strata
