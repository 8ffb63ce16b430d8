// `strata bench gpu` (bench/bench_gpu.cc): one GPU, bf16: tokens/s and MFU on the device, with the optimizer on the host (ratio), and with params on NVMe where available. Builds everywhere; without CUDA it fails at once.
// Thread-safety: called once, from main.
#pragma once

#include <string>

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

// The flags of `strata bench gpu` beyond BenchArgs.
struct GpuBenchArgs {
  std::string presets = "gpt2-124m,gpt2-1.5b";  // --presets: models, comma-separated
  double peak_tflops = 0.0;  // --peak-tflops: dense bf16 peak; 0 = from the GPU's name
  std::string nvme_dir;      // --nvme-dir: for zero.param_tier=nvme; empty = $TMPDIR
  std::string nvme_presets = "gpt2-124m";  // --nvme-presets: models run with params on NVMe
};

Status RunBenchGpu(const BenchArgs& args, const GpuBenchArgs& gpu);

}  // namespace strata
