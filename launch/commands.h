// The `strata` subcommands. Each returns a Status; main() prints a failure and exits 1.
// Thread-safety: called once from main.
#pragma once

#include <string>
#include <vector>

#include "core/options.h"
#include "core/status.h"

namespace strata {

struct CommandArgs {
  std::string config_path;          // --config FILE.json
  std::vector<std::string> sets;    // --set section.key=value, in order
  std::string metrics_path;         // --metrics FILE.jsonl
  std::string trace_path;           // --trace FILE.json (train.trace_steps)
  int bench_steps = 3;              // bench: measured steps after one warm-up step
};

// `strata bench gpu` only (launch/bench_gpu.cc).
struct GpuBenchArgs {
  std::string presets = "gpt2-124m,gpt2-1.5b";  // --presets: models, comma-separated
  double peak_tflops = 0.0;  // --peak-tflops: dense bf16 peak; 0 = from the GPU's name
  std::string nvme_dir;      // --nvme-dir: for zero.param_tier=nvme; empty = $TMPDIR
  std::string nvme_presets = "gpt2-124m";  // --nvme-presets: models run with params on NVMe
};

Status RunTrain(const CommandArgs& args);

// `strata plan` (launch/plan.h): the decision order's configurations for a job and machine.
struct PlanArgs {
  std::string config_path;        // --config FILE.json: the job
  std::vector<std::string> sets;  // --set
  std::string hardware = "probe";  // --hardware probe|FILE
  bool reprobe = false;            // --reprobe: measure again instead of the cached probe
  std::string save_hardware;       // --save-hardware FILE: the figures used, as a hardware file
  std::string emit_path;           // --emit FILE.json: the recommended configuration
};
Status RunPlan(const PlanArgs& args);
// `strata bench plan [--dir DIR]` (launch/bench_plan.cc): predicted vs measured steps.
Status RunBenchPlan(const CommandArgs& args, const std::string& dir);

// `strata sample` (launch/sample.h): text from a checkpoint or a Hugging Face directory.
struct SampleArgs {
  std::string from;                // --from CHECKPOINT|hf:DIR
  std::string prompt;              // --prompt TEXT
  int tokens = 64;                 // --tokens N: new tokens
  float temperature = 1.0f;        // --temperature T: 0 = greedy
  int top_k = 0;                   // --top_k K: 0 = every token
  uint64_t seed = 1;               // --seed S
  std::string tokenizer;           // --tokenizer SPEC: "" = hf:DIR's own, else bytes
  std::string config_path;         // --config: device.* and train.dtype
  std::vector<std::string> sets;   // --set
};
Status RunSample(const SampleArgs& args);
Status RunBenchTrain(const CommandArgs& args);
// `strata report METRICS [--trace F] --out DIR` (launch/report.h): DIR/index.html.
Status RunReport(const std::string& metrics_path, const std::string& trace_path,
                 const std::string& out_dir);
// `strata bench trace` (launch/bench_trace.cc): the trace's cost, off and on.
Status RunBenchTrace(const CommandArgs& args);
Status RunBenchZero(const CommandArgs& args);
Status RunBenchOffload(const CommandArgs& args);
// `strata bench infinity --dir DIR`: optimizer/params on NVMe against the disk's rates.
Status RunBenchInfinity(const CommandArgs& args, const std::string& dir);
// One GPU, bf16: tokens/s and MFU on device, offloaded and (where it exists) NVMe params.
Status RunBenchGpu(const CommandArgs& args, const GpuBenchArgs& gpu);
// `strata export --from CHECKPOINT --to hf:DIR|llmc:FILE|peft:DIR [--dtype fp32|bf16]
// [--shard-size 5GiB] [--merge-lora]`: launch/export_weights.h.
Status RunExport(const std::string& from, const std::string& to, DType dtype,
                 const std::string& shard_size, bool merge_lora);
// `strata bench import --dir DIR [--file-dtype fp32|bf16]`: Hugging Face import MB/s against
// a sequential read of the same files, written in `file_dtype` (launch/bench_import.cc).
Status RunBenchImport(const CommandArgs& args, const std::string& dir, DType file_dtype);
// `strata bench nvme --dir DIR [--size 1GiB] [--engine auto]`: nvme/disk_bench.h.
Status RunBenchNvme(const std::string& dir, const std::string& size, IoEngineKind engine);

}  // namespace strata
