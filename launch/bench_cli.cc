// `strata bench <name>`: each benchmark's flags (bench/ does the measuring). The training
// benchmarks share the job and --steps flags (AddBenchFlags), each with its own default.
#include <memory>
#include <string>

#include "bench/bench_adam.h"
#include "bench/bench_checkpoint.h"
#include "bench/bench_gpu.h"
#include "bench/bench_import.h"
#include "bench/bench_infinity.h"
#include "bench/bench_lora.h"
#include "bench/bench_nvme.h"
#include "bench/bench_offload.h"
#include "bench/bench_plan.h"
#include "bench/bench_trace.h"
#include "bench/bench_train.h"
#include "bench/bench_zero.h"
#include "launch/commands.h"

namespace strata {
namespace {

// A training benchmark: `name`'s subcommand with the shared flags and `default_steps`.
CLI::App* AddTrainingBench(CLI::App* bench, const std::string& name, const std::string& about,
                           int default_steps, const std::string& steps_help,
                           const std::shared_ptr<BenchArgs>& args) {
  CLI::App* app = bench->add_subcommand(name, about);
  args->steps = default_steps;
  AddBenchFlags(app, args.get(), steps_help);
  return app;
}

// `strata bench train`: the training step split and rates.
void AddTrainBench(CLI::App* bench, Commands* commands) {
  auto train = std::make_shared<BenchArgs>();
  commands->push_back(
      {AddTrainingBench(bench, "train",
                        "ms/step split, tokens/s, GFLOP/s vs the measured FMA peak, bf16 vs fp32",
                        3, "measured steps per dtype", train),
       [train]() { return RunBenchTrain(*train); }});
}

// `strata bench plan`: strata plan against runs.
void AddPlanBench(CLI::App* bench, Commands* commands) {
  auto plan = std::make_shared<BenchArgs>();
  auto plan_dir = std::make_shared<std::string>();
  CLI::App* plan_app = AddTrainingBench(
      bench, "plan",
      "strata plan's predicted step and peaks vs runs of each configuration (goal 20%)",
      8, "measured steps per configuration (quartiles of its steps)", plan);
  plan_app->add_option("--dir", *plan_dir, "zero.nvme_dir for the NVMe configurations");
  commands->push_back({plan_app, [plan, plan_dir]() { return RunBenchPlan(*plan, *plan_dir); }});
}

// `strata bench trace`: the trace's cost.
void AddTraceBench(CLI::App* bench, Commands* commands) {
  auto trace = std::make_shared<BenchArgs>();
  commands->push_back(
      {AddTrainingBench(
           bench, "trace",
           "the timeline trace's cost: step time without, off and on (goals <= 1%, 3%)", 20,
           "measured steps per session", trace),
       [trace]() { return RunBenchTrace(*trace); }});
}

// `strata bench checkpoint`: what checkpoints cost training, synchronous and background.
void AddCheckpointBench(CLI::App* bench, Commands* commands) {
  auto checkpoint = std::make_shared<BenchArgs>();
  struct CheckpointArgs {
    std::string dir;
    int rounds = 3;
  };
  auto extra = std::make_shared<CheckpointArgs>();
  CLI::App* app = AddTrainingBench(
      bench, "checkpoint",
      "a checkpoint's extra wall time: synchronous write (fsync) vs background (stall + "
      "slowed steps); goal background extra / synchronous write <= 0.1",
      6, "steps per round and mode (the first a checkpoint step)", checkpoint);
  app->add_option("--dir", extra->dir, "directory for the checkpoints (default $TMPDIR)");
  app->add_option("--rounds", extra->rounds, "rounds (the modes take turns in each)");
  commands->push_back({app, [checkpoint, extra]() {
                         return RunBenchCheckpoint(*checkpoint, extra->dir, extra->rounds);
                       }});
}

// `strata bench zero`: the ZeRO stages at world 2.
void AddZeroBench(CLI::App* bench, Commands* commands) {
  auto zero = std::make_shared<BenchArgs>();
  commands->push_back(
      {AddTrainingBench(bench, "zero",
                        "world 2: step time of ZeRO stages 1-3 vs stage 0, compute-stream stall",
                        3, "measured steps per stage and round", zero),
       [zero]() { return RunBenchZero(*zero); }});
}

// `strata bench offload`: the optimizer on the host.
void AddOffloadBench(CLI::App* bench, Commands* commands) {
  auto offload = std::make_shared<BenchArgs>();
  commands->push_back(
      {AddTrainingBench(
           bench, "offload",
           "optimizer on the host vs on the device: step time, exposed optimizer time", 3,
           "measured steps per configuration and round", offload),
       [offload]() { return RunBenchOffload(*offload); }});
}

// `strata bench gpu`: one GPU.
void AddGpuBench(CLI::App* bench, Commands* commands) {
  auto gpu = std::make_shared<BenchArgs>();
  auto gpu_args = std::make_shared<GpuBenchArgs>();
  CLI::App* gpu_app = AddTrainingBench(
      bench, "gpu",
      "one GPU, bf16: tokens/s and MFU of gpt2-124m and gpt2-1.5b on device, with the "
      "optimizer on the host (ratio), and with params on NVMe where available",
      5, "measured steps per placement", gpu);
  gpu_app->add_option("--presets", gpu_args->presets, "models, comma-separated");
  gpu_app->add_option("--peak-tflops", gpu_args->peak_tflops,
                      "dense bf16 peak of the card in TFLOP/s (default: from its name)");
  gpu_app->add_option("--nvme-dir", gpu_args->nvme_dir,
                      "directory for zero.param_tier=nvme (default $TMPDIR)");
  gpu_app->add_option("--nvme-presets", gpu_args->nvme_presets,
                      "models also run with params on NVMe, comma-separated (default "
                      "gpt2-124m)");
  commands->push_back({gpu_app, [gpu, gpu_args]() { return RunBenchGpu(*gpu, *gpu_args); }});
}

// `strata bench infinity`: optimizer and params on NVMe.
void AddInfinityBench(CLI::App* bench, Commands* commands) {
  auto infinity = std::make_shared<BenchArgs>();
  auto infinity_dir = std::make_shared<std::string>();
  CLI::App* infinity_app = AddTrainingBench(
      bench, "infinity",
      "optimizer/params on NVMe: step time vs the disk's rates, compute stall, 8-bit states", 3,
      "measured steps per configuration", infinity);
  infinity_app->add_option("--dir", *infinity_dir, "directory for the swap files (an SSD)")
      ->required();
  auto states_only = std::make_shared<bool>(false);
  infinity_app->add_flag("--states-only", *states_only,
                         "only 8-bit Adam states against fp32 (optimizer on NVMe, grads on "
                         "host): bytes and step time, alternating pairs");
  commands->push_back({infinity_app, [infinity, infinity_dir, states_only]() {
                         return RunBenchInfinity(*infinity, *infinity_dir, *states_only);
                       }});
}

// `strata bench import`: the Hugging Face import.
void AddImportBench(CLI::App* bench, Commands* commands) {
  auto import = std::make_shared<BenchArgs>();
  auto import_dir = std::make_shared<std::string>();
  auto import_dtype = std::make_shared<DType>(DType::kF32);
  CLI::App* import_app = bench->add_subcommand(
      "import", "Hugging Face import MB/s against a sequential read of the same files");
  import_app->add_option("--dir", *import_dir, "directory for the model files (removed after)")
      ->required();
  AddJobFlags(import_app, &import->config_path, &import->sets,
              "e.g. model.preset=llama-1b (default gpt2-124m)");
  import_app
      ->add_option("--file-dtype", *import_dtype,
                   "the safetensors' dtype: fp32 (as GPT-2 ships) | bf16 (as the LLaMA family "
                   "ships)")
      ->transform(CLI::CheckedTransformer(OptionValues<DType>()));
  commands->push_back({import_app, [import, import_dir, import_dtype]() {
                         return RunBenchImport(*import, *import_dir, *import_dtype);
                       }});
}

// `strata bench nvme`: the I/O engine against fio.
void AddNvmeBench(CLI::App* bench, Commands* commands) {
  struct NvmeArgs {
    std::string dir, size = "1GiB";
    IoEngineKind engine = IoEngineKind::kAuto;
  };
  auto nvme = std::make_shared<NvmeArgs>();
  CLI::App* nvme_app = bench->add_subcommand(
      "nvme", "sequential O_DIRECT read/write MB/s of the I/O engine vs fio and a plain loop");
  nvme_app->add_option("--dir", nvme->dir, "directory for the test file (removed afterwards)")
      ->required();
  nvme_app->add_option("--size", nvme->size, "test file size, e.g. 1GiB");
  nvme_app->add_option("--engine", nvme->engine, "auto | io_uring | pread")
      ->transform(CLI::CheckedTransformer(OptionValues<IoEngineKind>()));
  commands->push_back(
      {nvme_app, [nvme]() { return RunBenchNvme(nvme->dir, nvme->size, nvme->engine); }});
}

// `strata bench adam`: the CPU Adam.
void AddAdamBench(CLI::App* bench, Commands* commands) {
  struct AdamArgs {
    int threads = 0;
    bool quick = false;
  };
  auto adam = std::make_shared<AdamArgs>();
  CLI::App* adam_app = bench->add_subcommand(
      "adam", "SIMD CPU Adam params/s (fp32 and 8-bit states) vs same-memory-pattern reference kernels, 50M and 200M");
  adam_app->add_option("--threads", adam->threads, "threads; 0 = all cores");
  adam_app->add_flag("--quick", adam->quick, "small sizes (5M, 20M) for a smoke test");
  commands->push_back({adam_app, [adam]() { return RunBenchAdam(adam->threads, adam->quick); }});
}

// `strata bench lora`: LoRA on a quantized base.
void AddLoraBench(CLI::App* bench, Commands* commands) {
  auto args = std::make_shared<BenchArgs>();
  auto lora = std::make_shared<LoraBenchArgs>();
  CLI::App* app = AddTrainingBench(
      bench, "lora",
      "LoRA on a quantized frozen base: bytes/param of NF4 and int8 matrices (goals <= 0.53, "
      "1.07), step time NF4 / bf16 base (goal <= 1.15), NVMe reads NF4 / bf16 (goal <= 0.27)",
      2, "measured steps per base and round", args);
  app->add_option("--pairs", lora->rounds,
                  "rounds in which the bf16, NF4 and int8 bases take turns (the median of "
                  "their ratios; default 5)")
      ->check(CLI::Range(1, 100));
  app->add_flag_function(
      "--no-int8", [lora](int64_t) { lora->int8 = false; },
      "leave the int8 base out of the step-time rounds");
  app->add_option("--dir", lora->dir,
                  "where the NVMe part's swap files go, in a new directory removed after "
                  "(default /var/tmp, else .; not tmpfs)");
  app->add_option("--nvme-steps", lora->nvme_steps,
                  "measured steps per base with it on NVMe (default 2)")
      ->check(CLI::Range(1, 100));
  app->add_flag("--layout-only", lora->skip_steps,
                "the bytes per parameter alone (no sessions)");
  commands->push_back({app, [args, lora]() { return RunBenchLora(*args, *lora); }});
}

}  // namespace

void AddBenchCommands(CLI::App& app, Commands* commands) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks (figures as same-run ratios)");
  bench->require_subcommand(1);
  AddTrainBench(bench, commands);
  AddPlanBench(bench, commands);
  AddTraceBench(bench, commands);
  AddCheckpointBench(bench, commands);
  AddZeroBench(bench, commands);
  AddOffloadBench(bench, commands);
  AddGpuBench(bench, commands);
  AddInfinityBench(bench, commands);
  AddImportBench(bench, commands);
  AddNvmeBench(bench, commands);
  AddAdamBench(bench, commands);
  AddLoraBench(bench, commands);
}

}  // namespace strata
