// `strata plan`: what fits, how fast, and which configuration to use, in the decision order
// of limited GPU memory (LoRA on the device; + recompute; full training on the device;
// optimizer on host; + gradients; + params on host; optimizer on NVMe; params on NVMe).
//
// Memory comes from the code that allocates, not from a formula: each configuration runs
// the real set-up and two training steps as a DRY RUN (DryRun): the CPU device in dry-run
// mode (device/cpu_device.h: every buffer accounted in the tier pools, none backed by memory),
// counting kernels (kernels/counting_ops.h), a communicator of a world that exists only on
// paper (collectives/dry_communicator.h) and NVMe tiers that touch no disk. The pools' peaks
// are the peaks a real run accounts; the counters give each step's work (FLOPs, Adam
// elements, bytes copied between tiers, read and written on NVMe, sent over the network).
//
// Time comes from those counts over the machine's rates (Hardware: measured by a probe, or
// given for a machine one does not have) and the overlaps the runtime does (PredictStep).
// Thread-safety: plain functions; a dry run starts the CPU device's stream threads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "device/memory.h"
#include "core/options.h"
#include "core/status.h"
#include "interop/import_weights.h"
#include "kernels/counting_ops.h"
#include "plan/hardware.h"

namespace strata {

// What a dry run of `options` at `world` ranks accounts and counts (rank 0's view; ranks
// are symmetric).
struct DryRunResult {
  PoolStats device, host;       // peaks over the set-up and the steps
  PoolStats device_setup, host_setup;  // after the set-up, before any step
  uint64_t nvme_file_bytes = 0;  // this rank's swap files
  // The second step's work (the first's differs: reads ahead, caches warming):
  OpCounts device_ops, host_ops;
  std::array<uint64_t, 3> copy_bytes{};  // host->device, device->host, within a tier
  uint64_t nvme_read_bytes = 0, nvme_written_bytes = 0;
  uint64_t param_nvme_read_bytes = 0, param_nvme_written_bytes = 0;  // the params' part
  // Params on NVMe: this rank's bytes of the first unit the forward needs, which no read
  // ahead can bring before the step (they are written back at the end of the previous one).
  uint64_t first_param_read_bytes = 0;
  uint64_t network_bytes = 0;     // sent by this rank (ring collectives)
  // With a node layout (DryRun's ranks_per_node): the bytes of a step sent within this
  // rank's node, and across nodes by the rank that sends the most across (docs/plan.md).
  uint64_t within_node_bytes = 0, across_node_bytes = 0;
  uint64_t tokens = 0;            // of the global batch
  // Host memory the set-up stages values in beyond the pools: a Hugging Face import's own
  // buffers (ImportPlan::HostBytes: the files' dtypes and the run's placements decide
  // them), else one unit's fp32 values (the largest: init, llm.c import); with a quantized
  // base, plus the packing of its units (the largest piece's fp32 values and a unit's
  // stored share).
  uint64_t staging_bytes = 0;
  ImportPlan import;  // a Hugging Face import's (model.from=hf:DIR), else empty
  // A LoRA run's frozen base: its parameters and the bytes it is stored in (a quantized
  // base's packed units: their stored bytes; the rest in train.dtype), the whole model's.
  uint64_t base_params = 0, base_bytes = 0;
};
// `backend`: the device the dry run models (its buffers are always the CPU device's; on
// CUDA the device tier is not host memory, which decides where an import writes).
// `ranks_per_node` (0: all on one node) splits the collectives' bytes within and across
// nodes, and lets zero.shard_group=node be planned (a node's ranks shard, the nodes hold
// replicas: the dry run has the engine's node and rail communicators).
StatusOr<DryRunResult> DryRun(const Options& options, int world,
                              BackendKind backend = BackendKind::kCpu, int ranks_per_node = 0);

// One configuration of the decision order: its name and the --set lines that make it from
// the job's options.
struct PlanConfig {
  std::string name;
  std::vector<std::string> sets;
  // A choice that changes the numerics the job did not ask for, shown with what it buys:
  // a quantized LoRA base, recommended only where no LoRA row of the job's own base fits
  // (not even with one row per micro-batch), then before full training; 8-bit Adam states
  // (train.optimizer_states=int8) in full training, recommended only where no full-training
  // row of the job's own states fits. `changes` says how.
  bool alternative = false;
  std::string changes;
  // The row an alternative varies, by name (its "against" in the plan); empty: the last
  // LoRA row of the job's own base before it.
  std::string against;
};
std::vector<PlanConfig> DecisionOrder(const Options& job, int world);

// A step's predicted time and what bounds it. On several nodes the network term is the
// slower of the bytes within a node at `network` and the bytes across nodes of a node's
// ranks at `inter_node_network` (the links run at once).
struct StepPrediction {
  double seconds = 0;
  std::string bottleneck;  // compute | PCIe | CPU Adam | disk | network
  double compute_s = 0, pcie_s = 0, adam_s = 0, disk_s = 0, network_s = 0;
};
// `shape_seconds` (may be null): seconds per call of each GEMM/attention shape of
// dry.device_ops.shapes measured on this machine (ShapeTimer, plan/plan_probe.h); then
// they price the device's GEMMs and attention instead of the hardware's FLOP rates.
StepPrediction PredictStep(const DryRunResult& dry, const Options& options,
                           const Hardware& hardware,
                           const std::map<std::array<int, 6>, double>* shape_seconds = nullptr);

struct PlannedConfig {
  PlanConfig config;
  Options options;      // the job with config.sets applied
  Status status;        // the dry run's (a set-up this job cannot have)
  DryRunResult dry;
  bool fits = false;
  std::string why_not;  // the tier that is short, and by how much
  uint64_t rss_estimate = 0;
  StepPrediction step;
  double tokens_per_s = 0;
};
struct Plan {
  std::vector<PlannedConfig> configs;
  // Index of the first that fits (an alternative only where no LoRA row of the job's own
  // base does), -1: none. On several nodes (hardware.nodes > 1) each
  // configuration at stage 1-3 on the cpu backend is also planned with
  // zero.shard_group=node right after it (the "hybrid" row), and of the two the faster one
  // that fits is recommended.
  int recommended = -1;
  std::vector<std::string> advice;  // what to buy / change
  // Where the recommendation is an alternative: that it changes the numerics, and why.
  std::string note;
};
// `timer` (may be null): this machine's shape timer, for a plan of this machine on the CPU
// backend (the probe): every configuration's GEMM and attention shapes are timed.
class ShapeTimer;
StatusOr<Plan> MakePlan(const Options& job, int world, const Hardware& hardware,
                        ShapeTimer* timer = nullptr);
std::string RenderPlan(const Plan& plan, const Hardware& hardware);
// MakePlan's "what to buy" lines, appended to plan->advice (its configurations made and
// `recommended` set): each configuration faster than the recommended one (any, where none
// fits) that does not fit, with what is short: GPU memory, RAM, free disk for the swap
// files. Where nothing fits, the smallest change (bytes short) first.
void AddHardwareAdvice(Plan* plan, const Hardware& hardware);

}  // namespace strata
