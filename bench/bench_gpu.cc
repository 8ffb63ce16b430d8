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

}  // namespace

Status RunBenchGpu(const BenchArgs& args, const GpuBenchArgs& gpu) {
  InitLogging(0, 1);
  // Fail fast, before any model is built: no CUDA build, or no usable GPU.
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

  std::vector<std::string> presets;
  for (absl::string_view p : absl::StrSplit(gpu.presets, ',', absl::SkipEmpty())) {
    presets.emplace_back(p);
  }
  if (presets.empty()) return absl::InvalidArgumentError("--presets lists no model");
  std::set<std::string> nvme_presets;
  for (absl::string_view p : absl::StrSplit(gpu.nvme_presets, ',', absl::SkipEmpty())) {
    nvme_presets.emplace(p);
  }
  const std::string nvme_dir =
      !gpu.nvme_dir.empty() ? gpu.nvme_dir
                            : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::error_code made_dir;
  std::filesystem::create_directories(nvme_dir, made_dir);  // a failure shows at the nvme run

  const std::vector<BenchPlacement> placements = {
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

  double peak_tflops = gpu.peak_tflops;
  const bool peak_given = peak_tflops > 0;
  std::string gpu_description;
  bool gpu_line_printed = false;
  std::printf("bench gpu: device.backend=cuda, bf16, one rank, 1 warm-up + %d measured steps "
              "per placement, train.grad_clip=0 unless --set; MFU = tokens x (6N + 12LCT) / "
              "dense bf16 peak\n",
              args.steps);
  for (const BenchPlacement& placement : placements) {
    std::printf("  %-8s %s\n", placement.name, placement.what);
  }
  std::fflush(stdout);

  struct ModelResult {
    std::string preset;
    Measured device, offload, nvme, delayed;
    bool nvme_available = false;
    bool nvme_skipped = false;  // not in --nvme-presets
    std::string nvme_reason;
  };
  bool any_failed = false;
  // Device and offload of every model first, then the NVMe placements (the slowest, and
  // the least likely to fit a short budget), so a timeout cuts the least valuable runs.
  std::vector<ModelResult> results(presets.size());
  for (size_t m = 0; m < presets.size(); ++m) results[m].preset = presets[m];
  const std::vector<std::pair<size_t, size_t>> order = [&] {
    std::vector<std::pair<size_t, size_t>> runs;  // (model, placement)
    for (size_t m = 0; m < presets.size(); ++m) {
      runs.push_back({m, 0});
      runs.push_back({m, 1});
      runs.push_back({m, 3});
    }
    for (size_t m = 0; m < presets.size(); ++m) runs.push_back({m, 2});
    return runs;
  }();
  for (const auto& [m, p] : order) {
    ModelResult& result = results[m];
    const std::string& preset = result.preset;
    const BenchPlacement& placement = placements[p];
    if (p == 2 && !nvme_presets.count(preset)) {
      result.nvme_skipped = true;
      continue;
    }
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
    StatusOr<Options> options = ParseOptions(args.config_path, sets);
    Measured* slot = p == 0   ? &result.device
                     : p == 1 ? &result.offload
                     : p == 2 ? &result.nvme
                              : &result.delayed;
    if (p == 2) {
      if (!options.ok()) {
        result.nvme_reason = std::string(options.status().message());
        std::printf("%-10s %-8s stage 3 with params on NVMe: refused by the options "
                    "parser:\n           %s\n",
                    preset.c_str(), placement.name, result.nvme_reason.c_str());
        std::fflush(stdout);
        continue;
      }
      result.nvme_available = true;
    } else if (!options.ok()) {
      return Annotate(options.status(), absl::StrCat(preset, " ", placement.name));
    }
    *slot = RunPlacement(*options, args.steps, &peak_tflops, &gpu_description);
    if (!gpu_line_printed && !gpu_description.empty()) {
      // Once, as soon as the first session has named the card.
      std::printf("GPU: %s; dense bf16 peak %.1f TFLOP/s (%s)\n", gpu_description.c_str(),
                  peak_tflops, peak_given ? "--peak-tflops" : "table");
      gpu_line_printed = true;
    }
    PrintLine(preset, placement, *options, *slot, p == 0 ? nullptr : &result.device);
    any_failed |= !slot->status.ok();
  }

  std::printf("goals (issue 6):\n");
  for (const ModelResult& r : results) {
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
  std::fflush(stdout);
  if (any_failed) {
    return absl::InternalError("bench gpu: at least one placement failed (see its line)");
  }
  return absl::OkStatus();
}

}  // namespace strata
