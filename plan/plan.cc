// See plan.h.
#include "plan/plan.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/dry_communicator.h"
#include "core/bytes.h"
#include "config/options_parse.h"
#include "device/cpu_device.h"
#include "kernels/attention_gemm.h"
#include "models/create_model.h"
#include "plan/plan_probe.h"
#include "runtime/engine.h"

namespace strata {
namespace {

constexpr uint64_t kUnbounded = 1ull << 60;
constexpr uint64_t kProcessBytes = 150ull << 20;  // the process without its pools

std::string GiB(uint64_t bytes) { return absl::StrFormat("%.2f GiB", bytes / double(1ull << 30)); }

double Seconds(double amount, double rate) { return amount <= 0 ? 0.0 : rate > 0 ? amount / rate : INFINITY; }

}  // namespace

StatusOr<DryRunResult> DryRun(const Options& options, int world, BackendKind backend,
                              int ranks_per_node) {
  const int k = ranks_per_node > 0 ? ranks_per_node : world;
  if (world % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: ", k, " ranks per node do not divide the world of ", world, " ranks"));
  }
  const bool hybrid = options.zero.shard_group == ShardGroup::kNode;
  if (hybrid && (k == world || k == 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: zero.shard_group=node needs several nodes of several ranks (", world / k,
        " node(s) of ", k, "): plan a cluster with a hardware file whose nodes and "
        "ranks_per_node say so"));
  }
  CpuDeviceOptions device_options;
  device_options.dry_run = true;
  device_options.dry_run_of_gpu = backend == BackendKind::kCuda;
  device_options.device_memory_bytes = kUnbounded;
  device_options.host_memory_bytes = kUnbounded;
  std::unique_ptr<Device> device = CreateCpuDevice(device_options);
  CountingOps ops(options.train.dtype), host_ops(options.train.dtype);
  DryCommunicator communicator(0, world, k);
  // Hybrid sharding's groups: rank 0's node (all within) and its rail (one rank per node).
  DryCommunicator node(0, k, k), rail(0, world / k, 1);
  Engine::ShardGroups groups;
  if (hybrid) groups = {&node, &rail};
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   CreateModel(options.model, options.train.recompute, options.train.dtype,
                               options.lora));
  ASSIGN_OR_RETURN(const EngineConfig config, EngineConfig::From(options, world));
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                   Engine::Create(config, device.get(), &ops, &host_ops, model.get(),
                                  &communicator, Engine::InitialState::kLoadedLater, groups));
  // The set-up's transient buffers (a unit's values go to its home through host buffers):
  // the largest unit of each group (trainable, frozen) stored once, from untouched memory.
  const auto& units = model->units();
  // A quantized base's units are packed a piece at a time (never stored here: their
  // quantization costs real time): the largest piece's fp32 values and the rank's stored
  // bytes of its unit, whatever the source.
  uint64_t packing_bytes = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!engine->state().Packed(u)) continue;
    const auto [begin, end] = engine->state().StoredRange(u);
    size_t piece = 0;
    for (const StoredTensor& t : engine->state().stored(u).tensors()) {
      for (const StoredPiece& p : t.pieces) piece = std::max(piece, p.layout.elements);
    }
    packing_bytes = std::max<uint64_t>(
        packing_bytes, piece * sizeof(float) + (end - begin) * DTypeBytes(config.dtype));
  }
  uint64_t largest_unit_bytes = packing_bytes;
  for (const bool trainable : {true, false}) {
    int largest = -1;
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      if (units[u].trainable() != trainable || engine->state().Packed(u)) continue;
      if (largest < 0 || engine->state().PaddedElements(u) > engine->state().PaddedElements(largest)) largest = u;
    }
    if (largest < 0) continue;
    const auto [begin, end] = engine->state().StoredRange(largest);
    largest_unit_bytes = std::max<uint64_t>(largest_unit_bytes, (end - begin) * sizeof(float));
    const size_t bytes = std::max<size_t>(4096, (end - begin) * sizeof(float));
    void* values = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (values == MAP_FAILED) return absl::ResourceExhaustedError("dry run: no address space");
    Status stored = engine->state().WriteStoredValues(largest, static_cast<const float*>(values));
    ::munmap(values, bytes);
    RETURN_IF_ERROR(stored);
  }
  DryRunResult result;
  result.staging_bytes = largest_unit_bytes;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (units[u].trainable()) continue;
    result.base_params += units[u].num_params();
    result.base_bytes += engine->state().Packed(u)
                             ? engine->state().stored(u).bytes()
                             : units[u].num_params() * DTypeBytes(options.train.dtype);
  }
  if (absl::StartsWith(options.model.from, "hf:")) {
    // The importer's buffers instead (its headers read, every tensor checked: a plan of
    // damaged files fails as the run would).
    ASSIGN_OR_RETURN(const HfWeights weights,
                     HfWeights::Open(options.model.from.substr(3), options.model, *model));
    result.import = PlanImport(weights, *engine, *model);
    // The packed units come after the others, the importer's buffers still held.
    result.staging_bytes = result.import.HostBytes() + packing_bytes;
  }
  result.device_setup = device->pool(Tier::kDevice).Stats();
  result.host_setup = device->pool(Tier::kHost).Stats();
  result.nvme_file_bytes = engine->nvme_file_bytes();
  const int B = options.train.micro_batch, T = options.train.seq_len;
  const std::vector<int32_t> tokens(static_cast<size_t>(B) * T, 0);
  std::vector<MicroBatch> batches(options.train.grad_accum, {tokens.data(), tokens.data()});
  for (int step = 0; step < 2; ++step) {
    if (step == 1) {  // count the second step alone
      ops.Reset();
      host_ops.Reset();
    }
    const std::array<uint64_t, 3> copies_before = device->dry_copy_bytes();
    const DryCommunicator* comms[] = {&communicator, &node, &rail};
    uint64_t sent_before = 0, within_before = 0, across_before = 0;
    for (const DryCommunicator* c : comms) {
      sent_before += c->bytes_sent();
      within_before += c->traffic().within_node;
      across_before += c->traffic().across_nodes;
    }
    // Steps back to back, as a run makes them (a Finish between them would drop what the
    // step end reads ahead for the next one).
    ASSIGN_OR_RETURN(StepResult step_result, engine->TrainStep(batches, 1e-4f, step));
    if (step == 1) {
      const std::array<uint64_t, 3> copies = device->dry_copy_bytes();
      for (int k = 0; k < 3; ++k) result.copy_bytes[k] = copies[k] - copies_before[k];
      result.network_bytes = result.within_node_bytes = result.across_node_bytes = 0;
      for (const DryCommunicator* c : comms) {
        result.network_bytes += c->bytes_sent();
        result.within_node_bytes += c->traffic().within_node;
        result.across_node_bytes += c->traffic().across_nodes;
      }
      result.network_bytes -= sent_before;
      result.within_node_bytes -= within_before;
      result.across_node_bytes -= across_before;
      result.nvme_read_bytes = step_result.nvme_read_bytes;
      result.nvme_written_bytes = step_result.nvme_written_bytes;
      result.param_nvme_read_bytes = step_result.param_nvme_read_bytes;
      result.param_nvme_written_bytes = step_result.param_nvme_written_bytes;
      if (result.param_nvme_read_bytes > 0 && !engine->trace().empty()) {
        const auto [begin, end] = engine->state().StoredRange(engine->trace().front().unit);
        result.first_param_read_bytes = (end - begin) * DTypeBytes(options.train.dtype);
      }
    }
  }
  RETURN_IF_ERROR(engine->Finish());
  result.device_ops = ops.counts();
  result.host_ops = host_ops.counts();
  result.device = device->pool(Tier::kDevice).Stats();
  result.host = device->pool(Tier::kHost).Stats();
  result.tokens = static_cast<uint64_t>(B) * T * options.train.grad_accum * world;
  engine.reset();
  return result;
}

std::vector<PlanConfig> DecisionOrder(const Options& job, int world) {
  const std::string rank = absl::StrCat("lora.rank=", job.lora.enabled() ? job.lora.rank : 16);
  const std::string nvme = "zero.nvme_dir=" + (job.zero.nvme_dir.empty() ? std::string("/tmp")
                                                                         : job.zero.nvme_dir);
  const std::string lora_stage = world > 1 ? "zero.stage=2" : "zero.stage=0";
  const std::string full_stage = world > 1 ? "zero.stage=3" : "zero.stage=0";
  const std::vector<std::string> device = {"zero.optimizer_tier=device", "zero.grad_tier=device",
                                           "zero.param_tier=device", "lora.base_tier=device"};
  auto with = [&](std::vector<std::string> sets) {
    std::vector<std::string> out = device;
    out.insert(out.end(), sets.begin(), sets.end());
    return out;
  };
  // The base as the job stores it (train.dtype unless it asks for a quantized one); then
  // NF4 on the device, the host and the SSD: alternatives unless the job asked for a
  // quantized base (then its own dtype, placed further off the device).
  const BaseDType asked = job.lora.enabled() ? job.lora.base_dtype : BaseDType::kTrain;
  const std::string base = absl::StrCat("lora.base_dtype=", BaseDTypeName(asked));
  const BaseDType quantized = asked == BaseDType::kTrain ? BaseDType::kNF4 : asked;
  const std::string qbase = absl::StrCat("lora.base_dtype=", BaseDTypeName(quantized));
  const std::string qname = asked == BaseDType::kNF4 || asked == BaseDType::kTrain
                                ? "NF4"
                                : std::string(BaseDTypeName(asked));
  const bool alternative = asked == BaseDType::kTrain;
  const std::string changes =
      absl::StrCat("the base's linear matrices stored as ", BaseDTypeName(quantized));
  std::vector<PlanConfig> order = {
      {"LoRA on the device", with({rank, base, lora_stage, "train.recompute=none"})},
      {"LoRA + recompute", with({rank, base, lora_stage, "train.recompute=blocks"})},
  };
  if (alternative) {
    order.push_back({"LoRA on an NF4 base",
                     with({rank, qbase, lora_stage, "train.recompute=blocks"}), true, changes});
  }
  order.push_back({absl::StrCat("LoRA, ", qname, " base on host"),
                   with({rank, qbase, "zero.stage=3", "train.recompute=blocks",
                         "lora.base_tier=host"}),
                   alternative, changes});
  order.push_back({absl::StrCat("LoRA, ", qname, " base on NVMe"),
                   with({rank, qbase, "zero.stage=3", "train.recompute=blocks",
                         "lora.base_tier=nvme", nvme}),
                   alternative, changes});
  const std::string full = "lora.base_dtype=train";
  std::vector<PlanConfig> rest = {
      {"full training on the device", with({"lora.rank=0", full_stage, "train.recompute=blocks"})},
      {"optimizer on host",
       with({"lora.rank=0", "zero.stage=2", "train.recompute=blocks", "zero.optimizer_tier=host"})},
      {"+ gradients on host",
       with({"lora.rank=0", "zero.stage=2", "train.recompute=blocks", "zero.optimizer_tier=host",
             "zero.grad_tier=host"})},
      {"+ params on host",
       with({"lora.rank=0", "zero.stage=3", "train.recompute=blocks", "zero.optimizer_tier=host",
             "zero.grad_tier=host", "zero.param_tier=host"})},
      {"optimizer on NVMe",
       with({"lora.rank=0", "zero.stage=3", "train.recompute=blocks", "zero.optimizer_tier=nvme",
             "zero.grad_tier=host", "zero.param_tier=host", nvme})},
      {"params on NVMe",
       with({"lora.rank=0", "zero.stage=3", "train.recompute=blocks", "zero.optimizer_tier=nvme",
             "zero.grad_tier=nvme", "zero.param_tier=nvme", nvme})},
  };
  // 8-bit Adam states where the optimizer's state is what binds: its memory on the device,
  // in RAM (with the params on the device, and with them), its traffic to the SSD;
  // alternatives unless the job asked for them.
  const bool states_asked = job.train.optimizer_states == OptimizerStates::kInt8;
  const std::set<std::string> eight_bit_twins = {"full training on the device",
                                                 "optimizer on host", "+ params on host",
                                                 "optimizer on NVMe"};
  for (PlanConfig& config : rest) {  // full training freezes nothing to quantize
    if (std::find(config.sets.begin(), config.sets.end(), full) == config.sets.end()) {
      config.sets.push_back(full);
    }
    const bool twin = !states_asked && eight_bit_twins.count(config.name) > 0;
    PlanConfig eight_bit = config;
    order.push_back(std::move(config));
    if (!twin) continue;
    eight_bit.against = eight_bit.name;
    eight_bit.name = eight_bit.name == "full training on the device"
                         ? "full, 8-bit Adam states"
                         : eight_bit.name + ", 8-bit Adam states";
    eight_bit.sets.push_back("train.optimizer_states=int8");
    eight_bit.alternative = true;
    eight_bit.changes = "Adam's moments stored in 8 bits, blockwise (train.optimizer_states=int8)";
    order.push_back(std::move(eight_bit));
  }
  return order;
}

StepPrediction PredictStep(const DryRunResult& dry, const Options& options,
                           const Hardware& hw,
                           const std::map<std::array<int, 6>, double>* shape_seconds) {
  StepPrediction p;
  const double matmul = options.train.dtype == DType::kBF16 && hw.matmul_flops_bf16 > 0
                            ? hw.matmul_flops_bf16
                            : hw.matmul_flops_fp32;
  const OpCounts& d = dry.device_ops;
  const OpCounts& h = dry.host_ops;
  // Attention runs at about half the GEMM rate (softmax between its two products).
  double untimed_bytes = d.elementwise_bytes;
  if (shape_seconds != nullptr) {  // each shape timed on this machine
    for (const auto& [shape, calls] : d.shapes) p.compute_s += calls * shape_seconds->at(shape);
    untimed_bytes -= d.shaped_bytes;
  } else {
    p.compute_s = Seconds(d.matmul_flops, matmul) + Seconds(d.attention_flops, matmul / 2);
  }
  // AdamW on the device, bandwidth-bound: 8-bit states move 16 + D bytes per element where
  // fp32 ones move 28 + D (kernels/counting_ops.h), at the same rate per byte.
  const double dtype_bytes = DTypeBytes(options.train.dtype);
  p.compute_s += Seconds(untimed_bytes + 16.0 * d.adam_elements +
                             16.0 * d.adam8bit_elements * (16 + dtype_bytes) / (28 + dtype_bytes),
                         hw.device_memory_bandwidth);
  p.pcie_s = Seconds(dry.copy_bytes[0], hw.host_to_device) +
             Seconds(dry.copy_bytes[1], hw.device_to_host);
  // Copies within a tier (staging into the NVMe tiers' host buffers) run at memory speed;
  // on the CPU backend they take the same cores.
  if (hw.backend == BackendKind::kCpu) {
    p.pcie_s += Seconds(dry.copy_bytes[2], hw.host_to_device);
  }
  const int node_ranks = std::max(1, hw.ranks_per_node);
  p.adam_s = Seconds(h.adam_elements, hw.cpu_adam_params / node_ranks) +
             Seconds(h.adam8bit_elements, hw.cpu_adam8bit_params / node_ranks) +
             Seconds(h.elementwise_bytes, hw.device_memory_bandwidth);
  // The disk: the optimizer's phase waits for the reads of its state (and of the gradients
  // on NVMe); the params' reads ahead of the forward and backward and every write-back
  // (queued, finished under the next step's compute) overlap the compute.
  const double ranks = hw.ranks_per_node;
  const double state_disk_s =
      Seconds((dry.nvme_read_bytes - dry.param_nvme_read_bytes) * ranks, hw.disk_read);
  const double param_disk_s = Seconds(dry.param_nvme_read_bytes * ranks, hw.disk_read) +
                              Seconds(dry.nvme_written_bytes * ranks, hw.disk_write);
  p.disk_s = param_disk_s + state_disk_s;
  // Early: the optimizer steps units during the backward (state off the device, no
  // clipping); else its phase follows the backward, and its CPU Adam and its state's reads
  // (pipelined chunk by chunk) are added to the step.
  const bool early = options.zero.optimizer_tier != StateTier::kDevice &&
                     options.train.grad_clip <= 0.0f;
  // With params on NVMe the step opens with its first unit's read and copy up, exposed: the
  // params tier orders a read after every write-back posted before it, and the unit was
  // written back at the end of the previous step. Early, it is the backward's last unit
  // (the rest were written back under the backward); else the optimizer's phase steps in
  // forward order and every unit's write-back is posted in it, while its disk is busy with
  // the state: all of them come before the read.
  double first_read_s = 0.0;
  if (dry.first_param_read_bytes > 0) {
    const double written = early ? dry.first_param_read_bytes : dry.param_nvme_written_bytes;
    first_read_s = Seconds(written * ranks, hw.disk_write) +
                   Seconds(dry.first_param_read_bytes * ranks, hw.disk_read) +
                   Seconds(dry.first_param_read_bytes, hw.host_to_device);
  }
  p.network_s = hw.nodes > 1
                    ? std::max(Seconds(dry.within_node_bytes, hw.network),
                               Seconds(dry.across_node_bytes * ranks, hw.inter_node_network))
                    : Seconds(dry.network_bytes, hw.network);
  struct Term {
    const char* name;
    double seconds;
  };
  const std::vector<Term> terms = {{"compute", p.compute_s}, {"PCIe", p.pcie_s},
                                   {"CPU Adam", p.adam_s},   {"disk", p.disk_s},
                                   {"network", p.network_s}};
  if (hw.backend == BackendKind::kCpu) {
    // One CPU plays the device and runs the CPU Adam and the copies: those add up; the disk
    // (its own I/O thread) and the other ranks overlap with them.
    p.seconds = early ? std::max({p.compute_s + p.adam_s + p.pcie_s, p.disk_s, p.network_s})
                      : std::max({p.compute_s + p.pcie_s, param_disk_s, p.network_s}) +
                            std::max(p.adam_s, state_disk_s);
  } else {
    // The GPU, the copy engines, the disk and the network run at once (the prefetch plan
    // issues transfers ahead).
    p.seconds = early ? std::max({p.compute_s, p.pcie_s, p.disk_s, p.network_s, p.adam_s})
                      : std::max({p.compute_s, p.pcie_s, param_disk_s, p.network_s}) +
                            std::max(p.adam_s, state_disk_s);
  }
  p.seconds += first_read_s;
  const Term* top = &terms[0];
  for (const Term& term : terms) {
    if (term.seconds > top->seconds) top = &term;
  }
  p.bottleneck = top->name;
  return p;
}

void AddHardwareAdvice(Plan* plan, const Hardware& hw) {
  // What to buy: configurations faster than the recommended one that do not fit, with the
  // resources that are short (GPU memory, RAM, free disk for the swap files).
  const double best = plan->recommended >= 0 ? plan->configs[plan->recommended].step.seconds : 0;
  std::vector<uint64_t> shortfalls;  // per advice line: the bytes short
  for (const PlannedConfig& c : plan->configs) {
    if (!c.status.ok() || c.fits) continue;
    if (plan->recommended >= 0 && !(c.step.seconds < best)) continue;
    std::string change;
    const uint64_t device_peak = c.dry.device.peak_bytes;
    if (device_peak > hw.device_memory_bytes) {
      absl::StrAppend(&change, "+", GiB(device_peak - hw.device_memory_bytes), " GPU memory");
    }
    const uint64_t host_need =
        (c.dry.host.peak_bytes + (hw.backend == BackendKind::kCpu ? device_peak : 0)) *
        std::max(1, hw.ranks_per_node);
    if (host_need > hw.host_memory_bytes) {
      absl::StrAppend(&change, change.empty() ? "" : " and ", "+",
                      GiB(host_need - hw.host_memory_bytes), " RAM");
    }
    // As the fits check: the swap files of every rank of the node on the one disk.
    const uint64_t disk_need = c.dry.nvme_file_bytes * std::max(1, hw.ranks_per_node);
    const uint64_t disk_short =
        disk_need > 0 && hw.disk_free_bytes > 0 && disk_need > hw.disk_free_bytes
            ? disk_need - hw.disk_free_bytes
            : 0;
    if (disk_short > 0) {
      absl::StrAppend(&change, change.empty() ? "" : " and ", "+", GiB(disk_short), " free NVMe");
    }
    if (change.empty()) continue;
    shortfalls.push_back(
        (device_peak > hw.device_memory_bytes ? device_peak - hw.device_memory_bytes : 0) +
        (host_need > hw.host_memory_bytes ? host_need - hw.host_memory_bytes : 0) + disk_short);
    if (plan->recommended >= 0) {
      plan->advice.push_back(
          absl::StrFormat("%s: %s instead of %s, %.1fx faster", change, c.config.name,
                          plan->configs[plan->recommended].config.name, best / c.step.seconds));
    } else {
      plan->advice.push_back(absl::StrFormat("%s: %s would fit", change, c.config.name));
    }
  }
  if (plan->recommended < 0) {
    // Nothing fits: the smallest change first.
    std::vector<size_t> order(plan->advice.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return shortfalls[a] < shortfalls[b]; });
    std::vector<std::string> sorted;
    for (size_t i : order) sorted.push_back(plan->advice[i]);
    plan->advice = std::move(sorted);
  }
}

namespace {

// One configuration of a plan: its dry run, whether it fits, its predicted step (a set-up
// that fails keeps its status).
PlannedConfig PlanOne(const Options& job, int world, const Hardware& hw, ShapeTimer* timer,
                      const PlanConfig& config) {
  PlannedConfig planned;
  planned.config = config;
  // The job's options with the configuration's keys over them (text round trip: the
  // same parser and checks as strata train).
  std::vector<std::string> sets =
      absl::StrSplit(FormatResolved(job), '\n', absl::SkipEmpty());
  sets.insert(sets.end(), config.sets.begin(), config.sets.end());
  StatusOr<Options> options = ParseOptions("", sets);
  if (!options.ok()) {
    planned.status = options.status();
    return planned;
  }
  planned.options = *options;
  StatusOr<DryRunResult> dry =
      DryRun(planned.options, world, hw.backend, hw.nodes > 1 ? hw.ranks_per_node : 0);
  if (!dry.ok()) {
    planned.status = dry.status();
    return planned;
  }
  planned.dry = *dry;
  if (hw.backend == BackendKind::kCuda &&
      planned.options.device.cuda_attention == CudaAttentionKind::kGemm) {
    // The GEMM attention's score matrices come from outside the device tier's pool.
    const ModelOptions m = ResolveModelOptions(planned.options.model);
    planned.dry.device.peak_bytes +=
        AttentionGemmScratchBytes(planned.options.train.dtype, planned.options.train.seq_len,
                                  m.heads * m.head_dim, m.heads, m.kv_heads);
  }
  const uint64_t device_peak = planned.dry.device.peak_bytes;
  const uint64_t host_peak =
      dry->host.peak_bytes + (hw.backend == BackendKind::kCpu ? device_peak : 0);
  const uint64_t host_share = hw.host_memory_bytes / std::max(1, hw.ranks_per_node);
  const uint64_t disk_need = dry->nvme_file_bytes * std::max(1, hw.ranks_per_node);
  std::vector<std::string> short_of;
  if (device_peak > hw.device_memory_bytes) {
    short_of.push_back(absl::StrCat("device needs ", GiB(device_peak), ", has ",
                                    GiB(hw.device_memory_bytes)));
  }
  if (host_peak > host_share) {
    short_of.push_back(absl::StrCat("host RAM needs ", GiB(host_peak), " per rank, has ",
                                    GiB(host_share)));
  }
  if (disk_need > 0 && hw.disk_free_bytes > 0 && disk_need > hw.disk_free_bytes) {
    short_of.push_back(absl::StrCat("NVMe needs ", GiB(disk_need), ", has ",
                                    GiB(hw.disk_free_bytes), " free"));
  }
  planned.fits = short_of.empty();
  planned.why_not = absl::StrJoin(short_of, "; ");
  // RSS: the pools (RAM), the set-up's staging (an import's buffers, or one unit's fp32
  // values), and the process itself (libraries, kernels' scratch, data, threads: ~150 MiB
  // here).
  planned.rss_estimate = host_peak + dry->staging_bytes + kProcessBytes;
  std::map<std::array<int, 6>, double> shape_seconds;
  if (timer != nullptr) {
    for (const auto& [shape, calls] : dry->device_ops.shapes) {
      StatusOr<double> seconds = timer->SecondsPerCall(planned.options.train.dtype, shape);
      if (!seconds.ok()) {
        planned.status = seconds.status();
        return planned;
      }
      shape_seconds[shape] = *seconds;
    }
  }
  planned.step =
      PredictStep(*dry, planned.options, hw, timer != nullptr ? &shape_seconds : nullptr);
  planned.tokens_per_s = planned.step.seconds > 0 && std::isfinite(planned.step.seconds)
                             ? dry->tokens / planned.step.seconds
                             : 0;
  return planned;
}

}  // namespace

StatusOr<Plan> MakePlan(const Options& job, int world, const Hardware& hw, ShapeTimer* timer) {
  const bool cluster = hw.nodes > 1;
  if (cluster && world != hw.nodes * hw.ranks_per_node) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: the hardware has ", hw.nodes, " nodes of ", hw.ranks_per_node,
        " ranks, but the job's zero.world is ", world, ": set zero.world=",
        hw.nodes * hw.ranks_per_node));
  }
  if (job.zero.shard_group == ShardGroup::kNode && !cluster) {
    return absl::InvalidArgumentError(
        "plan: zero.shard_group=node shards within a node and replicates across nodes: plan "
        "it for a cluster (a --hardware file with nodes > 1, ranks_per_node and "
        "inter_node_network; docs/plan.md)");
  }
  Plan plan;
  // The first of each kind that fits (of flat and hybrid, the faster): LoRA on the base as
  // the job stores it; an alternative (a quantized base the job did not ask for); full
  // training.
  int lora = -1, alternative = -1, full = -1, full_alternative = -1;
  for (const PlanConfig& config : DecisionOrder(job, world)) {
    const int flat = static_cast<int>(plan.configs.size());
    plan.configs.push_back(PlanOne(job, world, hw, timer, config));
    const PlannedConfig& planned = plan.configs[flat];
    // On a cluster, the same with hybrid sharding (stages 1-3, the MPI communicator).
    int hybrid = -1;
    if (cluster && job.zero.shard_group != ShardGroup::kNode && planned.status.ok() &&
        planned.options.zero.stage >= 1 && hw.backend == BackendKind::kCpu &&
        hw.ranks_per_node > 1) {
      PlanConfig variant = config;
      variant.name += ", hybrid";
      variant.sets.push_back("zero.shard_group=node");
      hybrid = static_cast<int>(plan.configs.size());
      plan.configs.push_back(PlanOne(job, world, hw, timer, variant));
    }
    const bool is_lora = planned.options.lora.enabled();
    int* pick = config.alternative ? (is_lora ? &alternative : &full_alternative)
                : is_lora          ? &lora
                                   : &full;
    if (*pick >= 0) continue;
    // The first step of the decision order where something fits; of flat and hybrid there,
    // the faster that fits.
    for (const int i : {flat, hybrid}) {
      if (i < 0 || !plan.configs[i].fits) continue;
      if (*pick < 0 || plan.configs[i].step.seconds < plan.configs[*pick].step.seconds) {
        *pick = i;
      }
    }
  }
  // LoRA as the job stores its base, else (no such row fits, not even with one row per
  // micro-batch) a quantized base, which changes the numerics, before full training (the
  // decision order's: a LoRA job stays a LoRA job while one fits).
  // A change of the job goes first where one does: one row at a time, the same global batch
  // through gradient accumulation.
  std::optional<Plan> retry;
  std::string retry_line;
  if (lora < 0 && job.train.micro_batch > 1) {
    Options smaller = job;
    smaller.train.grad_accum *= smaller.train.micro_batch;
    smaller.train.micro_batch = 1;
    StatusOr<Plan> made = MakePlan(smaller, world, hw, timer);
    if (made.ok() && made->recommended >= 0) {
      retry = std::move(*made);
      retry_line = absl::StrCat("train.micro_batch=1 with train.grad_accum=",
                                smaller.train.grad_accum, " (the same batch): ",
                                retry->configs[retry->recommended].config.name, " fits");
    }
  }
  if (retry && retry->configs[retry->recommended].options.lora.enabled() &&
      !retry->configs[retry->recommended].config.alternative) {
    AddHardwareAdvice(&plan, hw);
    plan.advice.insert(plan.advice.begin(), retry_line);
    return plan;
  }
  plan.recommended = lora >= 0          ? lora
                     : alternative >= 0   ? alternative
                     : full >= 0          ? full
                                          : full_alternative;
  AddHardwareAdvice(&plan, hw);
  if (lora < 0 && alternative >= 0) {
    plan.note = absl::StrCat("no LoRA on the base as the job stores it fits: ",
                             plan.configs[alternative].config.name,
                             " does, and changes the numerics (",
                             plan.configs[alternative].config.changes, ")");
  } else if (plan.recommended >= 0 && plan.recommended == full_alternative) {
    plan.note = absl::StrCat("no full training with the job's fp32 Adam states fits: ",
                             plan.configs[full_alternative].config.name,
                             " does, and changes the numerics (",
                             plan.configs[full_alternative].config.changes, ")");
  }
  if (plan.recommended < 0 && retry) plan.advice.insert(plan.advice.begin(), retry_line);
  return plan;
}

std::string RenderPlan(const Plan& plan, const Hardware& hw) {
  std::string out = absl::StrCat("plan for ", hw.source, " (", hw.backend == BackendKind::kCpu ? "cpu" : "cuda",
                                 " backend; device ", GiB(hw.device_memory_bytes), ", RAM ",
                                 GiB(hw.host_memory_bytes), ")\n");
  if (hw.nodes > 1) {
    absl::StrAppend(&out, hw.nodes, " nodes of ", hw.ranks_per_node,
                    " ranks; each configuration also planned with hybrid sharding "
                    "(zero.shard_group=node: shards within a node, replicas across nodes)\n");
  }
  absl::StrAppend(&out, absl::StrFormat("%-38s %11s %11s %11s %11s %5s %10s %10s  %s\n",
                                        "configuration", "device", "pinned host", "RSS est.",
                                        "NVMe files", "fits", "step s", "tokens/s",
                                        "bound by"));
  for (size_t i = 0; i < plan.configs.size(); ++i) {
    const PlannedConfig& c = plan.configs[i];
    const std::string name =
        absl::StrCat(static_cast<int>(i) == plan.recommended ? "* " : "  ", c.config.name);
    if (!c.status.ok()) {
      absl::StrAppend(&out, absl::StrFormat("%-38s cannot run: %s\n", name, c.status.message()));
      continue;
    }
    const bool priced = std::isfinite(c.step.seconds);
    absl::StrAppend(
        &out, absl::StrFormat("%-38s %11s %11s %11s %11s %5s %10s %10s  %s\n", name,
                              GiB(c.dry.device.peak_bytes), GiB(c.dry.host.peak_bytes),
                              GiB(c.rss_estimate), GiB(c.dry.nvme_file_bytes),
                              c.fits ? "yes" : "no",
                              priced ? absl::StrFormat("%.3f", c.step.seconds) : "?",
                              priced ? absl::StrFormat("%.0f", c.tokens_per_s) : "?",
                              priced ? c.step.bottleneck
                                     : c.step.bottleneck + " (its rate is unknown)"));
    if (!c.fits) absl::StrAppend(&out, "      short: ", c.why_not, "\n");
    if (c.dry.base_params > 0) {
      absl::StrAppend(&out, absl::StrFormat("      base: %.3f bytes/param, %s\n",
                                            double(c.dry.base_bytes) / c.dry.base_params,
                                            GiB(c.dry.base_bytes)));
    }
    if (c.config.alternative) {
      // What it buys against the row it varies, or the last LoRA row of the base as the job
      // stores it.
      int reference = -1;
      for (size_t j = 0; j < i; ++j) {
        const PlannedConfig& r = plan.configs[j];
        if (!r.status.ok() || r.config.alternative) continue;
        if (c.config.against.empty() ? r.options.lora.enabled()
                                     : r.config.name == c.config.against) {
          reference = static_cast<int>(j);
        }
      }
      absl::StrAppend(&out, "      alternative: changes the numerics (", c.config.changes, ")");
      if (reference >= 0) {
        const PlannedConfig& r = plan.configs[reference];
        const std::string step =
            absl::StrFormat("step %s s (%s s)",
                            priced ? absl::StrFormat("%.3f", c.step.seconds) : "?",
                            std::isfinite(r.step.seconds) ? absl::StrFormat("%.3f", r.step.seconds)
                                                          : "?");
        if (c.config.against.empty()) {
          absl::StrAppend(&out, absl::StrFormat("; against %s: device %s (%s), base %s (%s), %s",
                                                r.config.name, GiB(c.dry.device.peak_bytes),
                                                GiB(r.dry.device.peak_bytes),
                                                GiB(c.dry.base_bytes), GiB(r.dry.base_bytes),
                                                step));
        } else {
          absl::StrAppend(
              &out, absl::StrFormat("; against %s: device %s (%s), pinned host %s (%s), NVMe "
                                    "per step %s (%s), %s",
                                    r.config.name, GiB(c.dry.device.peak_bytes),
                                    GiB(r.dry.device.peak_bytes), GiB(c.dry.host.peak_bytes),
                                    GiB(r.dry.host.peak_bytes),
                                    GiB(c.dry.nvme_read_bytes + c.dry.nvme_written_bytes),
                                    GiB(r.dry.nvme_read_bytes + r.dry.nvme_written_bytes), step));
        }
      }
      absl::StrAppend(&out, "\n");
    }
    if (hw.nodes > 1) {
      absl::StrAppend(
          &out, absl::StrFormat("      network per step: %s within a node (a rank), %s across "
                                "nodes (a node: %s at %s/s, %.3f s)\n",
                                FormatBytes(c.dry.within_node_bytes),
                                FormatBytes(c.dry.across_node_bytes),
                                FormatBytes(c.dry.across_node_bytes * hw.ranks_per_node),
                                FormatBytes(static_cast<uint64_t>(hw.inter_node_network)),
                                c.dry.across_node_bytes * double(hw.ranks_per_node) /
                                    hw.inter_node_network));
    }
  }
  if (plan.recommended >= 0) {
    absl::StrAppend(&out, "recommended: ", plan.configs[plan.recommended].config.name, "\n");
    if (!plan.note.empty()) absl::StrAppend(&out, "note: ", plan.note, "\n");
  } else {
    absl::StrAppend(&out, "nothing fits this machine\n");
  }
  for (const std::string& line : plan.advice) {
    absl::StrAppend(&out, plan.recommended >= 0 ? "what to buy: " : "smallest change: ", line,
                    "\n");
  }
  absl::StrAppend(&out,
                  "memory: device and pinned host are the pools' peaks in a dry run of the "
                  "real set-up and two steps (within 3% of runs); RSS is an estimate (the "
                  "RAM pools + the set-up's staging (an import's buffers, else one unit's fp32 "
                  "values) + 150 MiB of process; gpt2-124m here: "
                  "within 1%, the dataset's tokens not counted)\n");
  absl::StrAppend(&out,
                  "time: the dry run's counted work over the machine's rates (a probe times "
                  "this machine's GEMM and attention shapes); strata bench plan checks it "
                  "against runs\n");
  if (hw.backend == BackendKind::kCuda) {
    absl::StrAppend(&out, "time: GPU predictions are unverified until a GPU run checks them\n");
  }
  return out;
}

}  // namespace strata
