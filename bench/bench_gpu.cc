// `strata bench gpu`: training throughput on one GPU (device.backend=cuda, bf16, one rank)
// for gpt2-124m and gpt2-1.5b (GPT-2 XL), each in up to four placements, one after the
// other in one process (each session destroyed before the next is made, so each has the
// whole GPU):
//   device   stage 1, optimizer state, gradients and params all on the GPU
//   offload  stage 2, optimizer state (fp32 master, m, v) and gradient shards on the host
//            (ZeRO-Offload: SIMD CPU Adam, copies on their own streams); stage 2 so each
//            unit's gradient goes to the host as soon as its backward is done
//   nvme     stage 3 with params and optimizer state on NVMe (zero.param_tier=nvme,
//            zero.optimizer_tier=nvme) under --nvme-dir, for the models of --nvme-presets;
//            where the options are refused one line says why
//   delayed  offload with zero.param_update=delayed (each step's CPU Adam during the next
//            step; not the exact trajectory)
// Order: device, offload and delayed of every model, then the nvme placements (of the models in
// --nvme-presets, default gpt2-124m: a 1.5B model pages ~22 GB through the disk per step).
// Each placement runs one warm-up step, then --steps measured steps; the figures are their
// means. Gradient clipping is off (train.grad_clip=0) in every placement, so the offloaded
// AdamW of a unit may start during backward; --set train.grad_clip=1 measures the other case.
//
// MFU = model FLOP/s / the card's dense bf16 peak. Model FLOPs per step (PaLM's count,
// attention not halved for the causal mask): tokens x (6 N + 12 L C T), N = every
// parameter (tied embedding counted once), L layers, C channels, T = train.seq_len. The peak
// comes from --peak-tflops, else from a small table keyed by the GPU's name
// (cudaGetDeviceProperties, as the CUDA Device describes itself); an unknown card without
// --peak-tflops is an error.
// Goals (issue 6): MFU >= 0.50 on device; offload >= 0.85x the device's tokens/s; NVMe params
// >= 0.5x. Each is printed MET / NOT MET per model. A placement that fails (out of memory,
// a kernel error) is reported on its line and the others still run; the command then fails.
// Lines are flushed as they come, so a run cut short by a timeout keeps what it measured.
// Without CUDA (build or GPU) it fails at once, before any model is built.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "bench/bench_gpu.h"
#include "config/options_parse.h"
#include "device/cuda/cuda_device.h"
#include "core/logging.h"
#include "session/session.h"

namespace strata {
namespace {

// Dense (no sparsity) bf16 tensor-core peak, TFLOP/s, from NVIDIA's data sheets. More
// specific names first: "H100 PCIe" before "H100".
struct PeakEntry {
  const char* name_contains;
  double bf16_tflops;
};
constexpr PeakEntry kPeaks[] = {
    {"GH200", 989.4}, {"H200", 989.4},    {"H100 PCIe", 756.0}, {"H100 NVL", 835.5},
    {"H100", 989.4},  {"H800", 989.4},    {"B200", 2250.0},     {"A100", 312.0},
    {"A800", 312.0},  {"L40S", 362.05},   {"A10G", 70.0},       {"L4", 121.0},
};

// The GPU's name out of the CUDA Device's description "cuda:0 (NAME, sm_90, ...)".
std::string GpuName(const std::string& description) {
  const size_t open = description.find('(');
  if (open == std::string::npos) return description;
  const size_t comma = description.find(',', open);
  return description.substr(open + 1, comma == std::string::npos ? std::string::npos
                                                                   : comma - open - 1);
}

std::optional<double> TablePeakTflops(const std::string& gpu_name) {
  for (const PeakEntry& entry : kPeaks) {
    if (absl::StrContains(gpu_name, entry.name_contains)) return entry.bf16_tflops;
  }
  return std::nullopt;
}

struct BenchPlacement {
  const char* name;
  const char* what;
  std::vector<std::string> sets;
};

struct Measured {
  bool ran = false;
  Status status;
  double ms_per_step = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0, exposed_ms = 0;
  double tokens_per_s = 0, model_tflops = 0, mfu = 0;
  uint64_t peak_device_bytes = 0, peak_host_bytes = 0;
};

// Model FLOPs of one optimizer step; see the file comment.
double FlopsPerStep(const TrainingSession& session) {
  const Options& o = session.options();
  const double per_token = 6.0 * static_cast<double>(session.num_params()) +
                           12.0 * o.model.layers * o.model.channels * o.train.seq_len;
  return per_token * static_cast<double>(session.tokens_per_step());
}

// Runs one placement: a session, a warm-up step, `steps` measured steps. Reads the peak
// (from the first session that exists) into *peak_tflops where it is still unknown.
Measured RunPlacement(const Options& options, int steps, double* peak_tflops,
                      std::string* gpu_description) {
  Measured m;
  m.ran = true;
  auto fail = [&](const Status& status) {
    m.status = status;
    return m;
  };
  StatusOr<std::unique_ptr<TrainingSession>> made = TrainingSession::CreateSingleRank(options);
  if (!made.ok()) return fail(made.status());
  std::unique_ptr<TrainingSession> session = std::move(*made);
  if (gpu_description->empty()) *gpu_description = session->device().Describe();
  if (*peak_tflops <= 0) {
    const std::string name = GpuName(session->device().Describe());
    std::optional<double> peak = TablePeakTflops(name);
    if (!peak) {
      return fail(absl::NotFoundError(absl::StrCat(
          "no bf16 peak known for GPU '", name, "': give it with --peak-tflops (dense bf16 "
          "TFLOP/s from the card's data sheet)")));
    }
    *peak_tflops = *peak;
  }
  StatusOr<StepReport> warm = session->Step(0);
  if (!warm.ok()) return fail(Annotate(warm.status(), "warm-up step"));
  for (int i = 0; i < steps; ++i) {
    StatusOr<StepReport> report = session->Step(1 + i);
    if (!report.ok()) return fail(Annotate(report.status(), absl::StrCat("step ", 2 + i)));
    m.ms_per_step += report->ms_per_step / steps;
    m.forward_ms += report->result.forward_ms / steps;
    m.backward_ms += report->result.backward_ms / steps;
    m.optimizer_ms += report->result.optimizer_ms / steps;
    m.exposed_ms += report->result.optimizer_exposed_ms / steps;
    m.peak_device_bytes = report->device.peak_bytes;
    m.peak_host_bytes = report->host.peak_bytes;
  }
  m.tokens_per_s = session->tokens_per_step() / (m.ms_per_step / 1000.0);
  m.model_tflops = FlopsPerStep(*session) / (m.ms_per_step / 1000.0) / 1e12;
  m.mfu = m.model_tflops / *peak_tflops;
  return m;
}

void PrintLine(const std::string& preset, const BenchPlacement& placement, const Options& options,
               const Measured& m, const Measured* device) {
  if (!m.status.ok()) {
    std::printf("%-10s %-8s FAILED: %s\n", preset.c_str(), placement.name,
                std::string(m.status.message()).c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("%-10s %-8s B=%d T=%d | %8.1f ms/step (fwd %.1f, bwd %.1f, optimizer ran %.1f, "
              "step end waited %.1f) | %9.0f tokens/s | %6.1f TFLOP/s | MFU %.3f | peak device "
              "%s host %s",
              preset.c_str(), placement.name, options.train.micro_batch, options.train.seq_len,
              m.ms_per_step, m.forward_ms, m.backward_ms, m.optimizer_ms, m.exposed_ms,
              m.tokens_per_s, m.model_tflops, m.mfu, FormatBytes(m.peak_device_bytes).c_str(),
              FormatBytes(m.peak_host_bytes).c_str());
  if (device != nullptr && device->ran && device->status.ok()) {
    std::printf(" | %.2fx of device", m.tokens_per_s / device->tokens_per_s);
  }
  std::printf("\n");
  std::fflush(stdout);
}

const char* Verdict(bool met) { return met ? "MET" : "NOT MET"; }

// Fails fast, before any model is built: no CUDA build, or no usable GPU.
Status CheckCudaGpu() {
  if (!BuiltWithCuda()) {
    return absl::FailedPreconditionError(
        "bench gpu needs CUDA: this strata was built without it (no CUDA toolkit at build "
        "time, or --config=nocuda)");
  }
  StatusOr<int> gpus = CudaDeviceCount();
  if (!gpus.ok()) {
    return Status(gpus.status().code(),
                  absl::StrCat("bench gpu needs a usable GPU: ", gpus.status().message()));
  }
  if (*gpus <= 0) return absl::UnavailableError("bench gpu needs a usable GPU: CUDA sees none");
  return absl::OkStatus();
}

// The names of a comma-separated list, empty ones skipped.
std::vector<std::string> SplitNames(const std::string& list) {
  std::vector<std::string> names;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    names.emplace_back(name);
  }
  return names;
}

// --nvme-dir, else $TMPDIR, else /tmp; made here, where a failure is only reported by the
// nvme runs.
std::string MakeNvmeDir(const GpuBenchArgs& gpu) {
  const std::string nvme_dir =
      !gpu.nvme_dir.empty() ? gpu.nvme_dir
                            : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::error_code made_dir;
  std::filesystem::create_directories(nvme_dir, made_dir);  // a failure shows at the nvme run
  return nvme_dir;
}

// The placements, at these indices (see the file comment).
constexpr size_t kDevice = 0, kOffload = 1, kNvme = 2, kDelayed = 3;
std::vector<BenchPlacement> Placements(const std::string& nvme_dir) {
  return {
      {"device", "stage 1, everything on the GPU",
       {"zero.stage=1", "zero.optimizer_tier=device", "zero.grad_tier=device",
        "zero.param_tier=device"}},
      {"offload", "stage 2, optimizer state and grad shards on the host (CPU Adam)",
       {"zero.stage=2", "zero.optimizer_tier=host", "zero.grad_tier=host",
        "zero.param_tier=device"}},
      {"nvme", "stage 3, params and optimizer state on NVMe, grads on the host",
       {"zero.stage=3", "zero.optimizer_tier=nvme", "zero.grad_tier=host",
        "zero.param_tier=nvme", "zero.nvme_dir=" + nvme_dir}},
      {"delayed", "as offload, with zero.param_update=delayed (CPU Adam during the next step)",
       {"zero.stage=2", "zero.optimizer_tier=host", "zero.grad_tier=host",
        "zero.param_tier=device", "zero.param_update=delayed"}},
  };
}

void PrintHeader(int steps, const std::vector<BenchPlacement>& placements) {
  std::printf("bench gpu: device.backend=cuda, bf16, one rank, 1 warm-up + %d measured steps "
              "per placement, train.grad_clip=0 unless --set; MFU = tokens x (6N + 12LCT) / "
              "dense bf16 peak\n",
              steps);
  for (const BenchPlacement& placement : placements) {
    std::printf("  %-8s %s\n", placement.name, placement.what);
  }
  std::fflush(stdout);
}

// One model's placements as they ran.
struct ModelResult {
  std::string preset;
  Measured device, offload, nvme, delayed;
  bool nvme_available = false;
  bool nvme_skipped = false;  // not in --nvme-presets
  std::string nvme_reason;

  Measured& slot(size_t placement) {
    return placement == kDevice    ? device
           : placement == kOffload ? offload
           : placement == kNvme    ? nvme
                                   : delayed;
  }
};

// (model, placement) in the order they run: device, offload and delayed of every model
// first, then the NVMe placements (the slowest, and the least likely to fit a short
// budget), so a timeout cuts the least valuable runs.
std::vector<std::pair<size_t, size_t>> RunOrder(size_t models) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t m = 0; m < models; ++m) {
    runs.push_back({m, kDevice});
    runs.push_back({m, kOffload});
    runs.push_back({m, kDelayed});
  }
  for (size_t m = 0; m < models; ++m) runs.push_back({m, kNvme});
  return runs;
}

// The --set of one model in one placement: the bench's defaults, the job's --set, then
// what the bench and the placement fix.
StatusOr<std::vector<std::string>> PlacementSets(const BenchArgs& args, const std::string& preset,
                                                 const BenchPlacement& placement) {
  // Models wider than gpt2-124m (the 1.5B) get half the micro-batch.
  StatusOr<Options> shape = ParseOptions("", {"model.preset=" + preset});
  if (!shape.ok()) return Annotate(shape.status(), "bench gpu --presets");
  const bool big = shape->model.channels > 768;
  std::vector<std::string> sets = {
      "model.preset=" + preset, big ? "train.micro_batch=8" : "train.micro_batch=16",
      "train.seq_len=1024", "train.dtype=bf16", "train.grad_clip=0",
      // The CUDA device clips this to the GPU's free memory: the whole card.
      "device.memory_limit=1024GiB"};
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  sets.insert(sets.end(), {"device.backend=cuda", "zero.world=1", "train.eval_every=0",
                           "train.steps=1000000", "train.grad_accum=1"});
  sets.insert(sets.end(), placement.sets.begin(), placement.sets.end());
  return sets;
}

// The peak the MFU is taken against, and the GPU as the first session names it.
struct GpuSeen {
  double peak_tflops = 0;   // --peak-tflops, else from the table once a session exists
  bool peak_given = false;  // by --peak-tflops
  std::string description;
  bool line_printed = false;
};

// Runs model `result.preset` in placement `p` into its slot and prints its line (and the
// GPU's line before the first). A failed run is only reported on its line; errors returned
// are the job's options refused outside the nvme placement.
Status RunModelPlacement(const BenchArgs& args, const std::set<std::string>& nvme_presets,
                         const BenchPlacement& placement, size_t p, ModelResult& result,
                         GpuSeen& seen) {
  const std::string& preset = result.preset;
  if (p == kNvme && !nvme_presets.count(preset)) {
    result.nvme_skipped = true;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> sets, PlacementSets(args, preset, placement));
  StatusOr<Options> options = ParseOptions(args.config_path, sets);
  if (p == kNvme) {
    if (!options.ok()) {
      result.nvme_reason = std::string(options.status().message());
      std::printf("%-10s %-8s stage 3 with params on NVMe: refused by the options "
                  "parser:\n           %s\n",
                  preset.c_str(), placement.name, result.nvme_reason.c_str());
      std::fflush(stdout);
      return absl::OkStatus();
    }
    result.nvme_available = true;
  } else if (!options.ok()) {
    return Annotate(options.status(), absl::StrCat(preset, " ", placement.name));
  }
  Measured& slot = result.slot(p);
  slot = RunPlacement(*options, args.steps, &seen.peak_tflops, &seen.description);
  if (!seen.line_printed && !seen.description.empty()) {
    // Once, as soon as the first session has named the card.
    std::printf("GPU: %s; dense bf16 peak %.1f TFLOP/s (%s)\n", seen.description.c_str(),
                seen.peak_tflops, seen.peak_given ? "--peak-tflops" : "table");
    seen.line_printed = true;
  }
  PrintLine(preset, placement, *options, slot, p == kDevice ? nullptr : &result.device);
  return absl::OkStatus();
}

// One model's lines under "goals (issue 6):".
void PrintGoals(const ModelResult& r) {
  if (r.device.status.ok()) {
    std::printf("  %-10s MFU on device >= 0.50: %.3f %s\n", r.preset.c_str(), r.device.mfu,
                Verdict(r.device.mfu >= 0.50));
  } else {
    std::printf("  %-10s MFU on device >= 0.50: not measured (failed)\n", r.preset.c_str());
  }
  if (r.device.status.ok() && r.offload.status.ok()) {
    const double ratio = r.offload.tokens_per_s / r.device.tokens_per_s;
    std::printf("  %-10s offload >= 0.85x of device: %.2fx %s\n", r.preset.c_str(), ratio,
                Verdict(ratio >= 0.85));
  } else {
    std::printf("  %-10s offload >= 0.85x of device: not measured (failed)\n",
                r.preset.c_str());
  }
  if (r.device.status.ok() && r.delayed.ran && r.delayed.status.ok()) {
    std::printf("  %-10s offload with delayed update: %.2fx of device (no goal; gradients "
                "one update old)\n",
                r.preset.c_str(), r.delayed.tokens_per_s / r.device.tokens_per_s);
  }
  if (r.nvme_skipped) {
    std::printf("  %-10s NVMe params >= 0.5x of device: not run (not in --nvme-presets)\n",
                r.preset.c_str());
  } else if (!r.nvme_available) {
    std::printf("  %-10s NVMe params >= 0.5x of device: not run (%s)\n", r.preset.c_str(),
                r.nvme_reason.c_str());
  } else if (r.device.status.ok() && r.nvme.status.ok()) {
    const double ratio = r.nvme.tokens_per_s / r.device.tokens_per_s;
    std::printf("  %-10s NVMe params >= 0.5x of device: %.2fx %s\n", r.preset.c_str(), ratio,
                Verdict(ratio >= 0.5));
  } else {
    std::printf("  %-10s NVMe params >= 0.5x of device: not measured (failed)\n",
                r.preset.c_str());
  }
}

// Whether a placement that ran failed (a placement not run keeps an OK status).
bool AnyFailed(const std::vector<ModelResult>& results) {
  for (const ModelResult& r : results) {
    for (const Measured* m : {&r.device, &r.offload, &r.nvme, &r.delayed}) {
      if (!m->status.ok()) return true;
    }
  }
  return false;
}

}  // namespace

Status RunBenchGpu(const BenchArgs& args, const GpuBenchArgs& gpu) {
  InitLogging(0, 1);
  RETURN_IF_ERROR(CheckCudaGpu());
  const std::vector<std::string> presets = SplitNames(gpu.presets);
  if (presets.empty()) return absl::InvalidArgumentError("--presets lists no model");
  const std::vector<std::string> nvme_list = SplitNames(gpu.nvme_presets);
  const std::set<std::string> nvme_presets(nvme_list.begin(), nvme_list.end());
  const std::vector<BenchPlacement> placements = Placements(MakeNvmeDir(gpu));

  GpuSeen seen;
  seen.peak_tflops = gpu.peak_tflops;
  seen.peak_given = gpu.peak_tflops > 0;
  PrintHeader(args.steps, placements);
  std::vector<ModelResult> results(presets.size());
  for (size_t m = 0; m < presets.size(); ++m) results[m].preset = presets[m];
  for (const auto& [m, p] : RunOrder(presets.size())) {
    RETURN_IF_ERROR(RunModelPlacement(args, nvme_presets, placements[p], p, results[m], seen));
  }

  std::printf("goals (issue 6):\n");
  for (const ModelResult& r : results) PrintGoals(r);
  std::fflush(stdout);
  if (AnyFailed(results)) {
    return absl::InternalError("bench gpu: at least one placement failed (see its line)");
  }
  return absl::OkStatus();
}

}  // namespace strata
