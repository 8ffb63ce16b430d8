// The `strata` command line: train | bench. Parsing by CLI11. Exit status: 0 done; 1 an
// error (one clear message); 2 a usage error (a mistyped command is named, with the
// closest one); 128 + N stopped by signal N (launch/interrupt.h).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "launch/bench_adam.h"
#include "launch/commands.h"
#include "launch/tokenize_command.h"
#include "launch/interrupt.h"
#include "launch/options_parse.h"

namespace {

// Edit distance (insertions, deletions, substitutions) for "did you mean".
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// What went wrong, naming a mistyped command word where that is the cause.
std::string UsageProblem(CLI::App& app, int argc, char** argv, const CLI::ParseError& error) {
  CLI::App* level = &app;
  std::string path = "strata";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') break;  // flags start: the command words are done
    if (level->get_subcommands({}).empty()) break;
    CLI::App* next = nullptr;
    std::string closest;
    size_t best = 3;
    for (CLI::App* sub : level->get_subcommands({})) {
      if (sub->get_name() == word) next = sub;
      const size_t distance = Distance(word, sub->get_name());
      if (distance < best) {
        best = distance;
        closest = sub->get_name();
      }
    }
    if (next == nullptr) {
      std::vector<std::string> names;
      for (CLI::App* sub : level->get_subcommands({})) names.push_back(sub->get_name());
      return "'" + path + " " + word + "': unknown command" +
             (closest.empty() ? "" : " (did you mean '" + closest + "'?)") + "; expected one of " +
             CLI::detail::join(names, ", ");
    }
    level = next;
    path += " " + word;
  }
  return path + ": " + error.what();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata: ZeRO training runtime (stages, CPU offload, NVMe offload)"};
  app.require_subcommand(1);
  strata::CommandArgs args;
  bool help_config = false;

  CLI::App* train =
      app.add_subcommand("train", "train a model (built-in, or model.from a Hugging Face or "
                                  "llm.c file)");
  train->add_option("--config", args.config_path, "JSON config file (sections model, data, "
                                                  "train, device, zero)");
  train->add_option("--set", args.sets, "override one key: section.key=value (repeatable)");
  train->add_option("--metrics", args.metrics_path, "write one JSON object per step here");
  train->add_option("--trace", args.trace_path,
                    "write a timeline trace (Chrome trace JSON: Perfetto, chrome://tracing) of "
                    "the steps train.trace_steps names (default 2:3); under several ranks one "
                    "file per rank, FILE.rank<k>.json");
  train->add_flag("--help-config", help_config, "list every config key with its default");

  std::string export_from, export_to, export_shard = "5GiB";
  strata::DType export_dtype = strata::DType::kF32;
  CLI::App* export_command = app.add_subcommand(
      "export", "a checkpoint's weights as a Hugging Face directory or an llm.c checkpoint");
  export_command->add_option("--from", export_from, "checkpoint: step-<k> directory or a "
                                                    "checkpoint_dir (its newest)")
      ->required();
  export_command->add_option("--to", export_to, "hf:DIR (config.json + safetensors), "
                                                "llmc:FILE (llm.c GPT-2, fp32) or, for LoRA "
                                                "adapters, peft:DIR (PEFT's adapter files)")
      ->required();
  export_command->add_option("--dtype", export_dtype, "hf:, peft: fp32 (exact) | bf16")
      ->transform(CLI::CheckedTransformer(strata::OptionValues<strata::DType>()));
  export_command->add_option("--shard-size", export_shard,
                             "hf: larger models go into safetensors shards of this size");
  bool export_merge_lora = false;
  export_command->add_flag("--merge-lora", export_merge_lora,
                           "a LoRA checkpoint to hf:DIR: its base with the adapters merged in");

  std::string tokenize_in, tokenize_out, tokenize_spec = "gpt2";
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "text to a token file ahead of training (data.path takes the file)");
  tokenize->add_option("--tokenizer", tokenize_spec,
                       "bytes | gpt2 | sentencepiece:FILE | hf:PATH (default gpt2)");
  tokenize->add_option("--in", tokenize_in, "text file (default: the embedded corpus)");
  tokenize->add_option("--out", tokenize_out, "token file to write")->required();

  strata::SampleArgs sample_args;
  CLI::App* sample = app.add_subcommand(
      "sample", "generate text from a checkpoint or a Hugging Face directory (KV cache)");
  sample->add_option("--from", sample_args.from, "checkpoint (step-<k> or a checkpoint_dir) "
                                                 "or hf:DIR")
      ->required();
  sample->add_option("--prompt", sample_args.prompt, "the text to continue")->required();
  sample->add_option("--tokens", sample_args.tokens,
                     "new tokens (default 64); past the model's positions the context slides");
  sample->add_option("--temperature", sample_args.temperature, "0 = greedy (default 1)");
  sample->add_option("--top_k", sample_args.top_k, "draw from the k most likely; 0 = all");
  sample->add_option("--seed", sample_args.seed, "the draw's seed (default 1)");
  sample->add_option("--tokenizer", sample_args.tokenizer,
                     "bytes | gpt2 | sentencepiece:FILE | hf:PATH; default: the one the "
                     "checkpoint was trained with, else hf:DIR's own, else bytes");
  sample->add_option("--config", sample_args.config_path, "JSON config: device.*, train.dtype");
  sample->add_option("--set", sample_args.sets, "device.backend=cuda, train.dtype=bf16, ...");

  strata::PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand(
      "plan", "what fits this machine (or another), how fast, and which configuration to use");
  plan->add_option("--config", plan_args.config_path, "JSON config of the job");
  plan->add_option("--set", plan_args.sets, "section.key=value overrides of the job");
  plan->add_option("--hardware", plan_args.hardware,
                   "probe (measure this machine, cached) or a hardware FILE.json");
  plan->add_flag("--reprobe", plan_args.reprobe, "measure again instead of the cached probe");
  plan->add_option("--save-hardware", plan_args.save_hardware,
                   "write the figures used as a hardware file (edit it to plan for another machine)");
  plan->add_option("--emit", plan_args.emit_path,
                   "write the recommended configuration as a config file strata train accepts");

  std::string report_metrics, report_trace, report_out;
  CLI::App* report = app.add_subcommand(
      "report", "an HTML page of plots (loss, step time, memory, NVMe, overlap) from a run");
  report->add_option("metrics", report_metrics, "the run's --metrics file (JSONL)")->required();
  report->add_option("--trace", report_trace, "the run's --trace file: per-step overlap");
  report->add_option("--out", report_out, "directory for index.html")->required();

  CLI::App* bench = app.add_subcommand("bench", "benchmarks (figures as same-run ratios)");
  bench->require_subcommand(1);
  CLI::App* bench_train = bench->add_subcommand(
      "train", "ms/step split, tokens/s, GFLOP/s vs the measured FMA peak, bf16 vs fp32");
  bench_train->add_option("--config", args.config_path, "JSON config file");
  bench_train->add_option("--set", args.sets, "override one key (repeatable)");
  bench_train->add_option("--steps", args.bench_steps, "measured steps per dtype")
      ->check(CLI::Range(1, 1000));

  std::string plan_dir;
  CLI::App* bench_plan = bench->add_subcommand(
      "plan", "strata plan's predicted step and peaks vs runs of each configuration (goal 20%)");
  bench_plan->add_option("--config", args.config_path, "JSON config file");
  bench_plan->add_option("--set", args.sets, "override one key (repeatable)");
  bench_plan->add_option("--steps", args.bench_steps, "measured steps per configuration")
      ->check(CLI::Range(1, 1000));
  bench_plan->add_option("--dir", plan_dir, "zero.nvme_dir for the NVMe configurations");

  CLI::App* bench_trace = bench->add_subcommand(
      "trace", "the timeline trace's cost: step time without, off and on (goals <= 1%, 3%)");
  bench_trace->add_option("--config", args.config_path, "JSON config file");
  bench_trace->add_option("--set", args.sets, "override one key (repeatable)");
  bench_trace->add_option("--steps", args.bench_steps, "measured steps per session (default 20)")
      ->check(CLI::Range(1, 1000));

  CLI::App* bench_zero = bench->add_subcommand(
      "zero", "world 2: step time of ZeRO stages 1-3 vs stage 0, compute-stream stall");
  bench_zero->add_option("--config", args.config_path, "JSON config file");
  bench_zero->add_option("--set", args.sets, "override one key (repeatable)");
  bench_zero->add_option("--steps", args.bench_steps, "measured steps per stage and round")
      ->check(CLI::Range(1, 1000));

  CLI::App* bench_offload = bench->add_subcommand(
      "offload", "optimizer on the host vs on the device: step time, exposed optimizer time");
  bench_offload->add_option("--config", args.config_path, "JSON config file");
  bench_offload->add_option("--set", args.sets, "override one key (repeatable)");
  bench_offload->add_option("--steps", args.bench_steps, "measured steps per configuration and round")
      ->check(CLI::Range(1, 1000));

  strata::GpuBenchArgs gpu_args;
  CLI::App* bench_gpu = bench->add_subcommand(
      "gpu", "one GPU, bf16: tokens/s and MFU of gpt2-124m and gpt2-1.5b on device, with the "
             "optimizer on the host (ratio), and with params on NVMe where available");
  bench_gpu->add_option("--config", args.config_path, "JSON config file");
  bench_gpu->add_option("--set", args.sets, "override one key (repeatable)");
  bench_gpu->add_option("--steps", args.bench_steps, "measured steps per placement (default 5)")
      ->check(CLI::Range(1, 1000));
  bench_gpu->add_option("--presets", gpu_args.presets, "models, comma-separated");
  bench_gpu->add_option("--peak-tflops", gpu_args.peak_tflops,
                        "dense bf16 peak of the card in TFLOP/s (default: from its name)");
  bench_gpu->add_option("--nvme-dir", gpu_args.nvme_dir,
                        "directory for zero.param_tier=nvme (default $TMPDIR)");
  bench_gpu->add_option("--nvme-presets", gpu_args.nvme_presets,
                        "models also run with params on NVMe, comma-separated (default "
                        "gpt2-124m)");

  std::string infinity_dir;
  CLI::App* bench_infinity = bench->add_subcommand(
      "infinity", "optimizer/params on NVMe: step time vs the disk's rates, compute stall");
  bench_infinity->add_option("--dir", infinity_dir, "directory for the swap files (an SSD)")
      ->required();
  bench_infinity->add_option("--config", args.config_path, "JSON config file");
  bench_infinity->add_option("--set", args.sets, "override one key (repeatable)");
  bench_infinity->add_option("--steps", args.bench_steps, "measured steps per configuration")
      ->check(CLI::Range(1, 1000));

  std::string import_dir;
  CLI::App* bench_import = bench->add_subcommand(
      "import", "Hugging Face import MB/s against a sequential read of the same files");
  bench_import->add_option("--dir", import_dir, "directory for the model files (removed after)")
      ->required();
  bench_import->add_option("--config", args.config_path, "JSON config file");
  bench_import->add_option("--set", args.sets, "e.g. model.preset=llama-1b (default gpt2-124m)");
  strata::DType import_file_dtype = strata::DType::kF32;
  bench_import
      ->add_option("--file-dtype", import_file_dtype,
                   "the safetensors' dtype: fp32 (as GPT-2 ships) | bf16 (as the LLaMA family "
                   "ships)")
      ->transform(CLI::CheckedTransformer(strata::OptionValues<strata::DType>()));

  std::string nvme_dir;
  std::string nvme_size = "1GiB";
  strata::IoEngineKind nvme_engine = strata::IoEngineKind::kAuto;
  CLI::App* bench_nvme = bench->add_subcommand(
      "nvme", "sequential O_DIRECT read/write MB/s of the I/O engine vs fio and a plain loop");
  bench_nvme->add_option("--dir", nvme_dir, "directory for the test file (removed afterwards)")
      ->required();
  bench_nvme->add_option("--size", nvme_size, "test file size, e.g. 1GiB");
  bench_nvme->add_option("--engine", nvme_engine, "auto | io_uring | pread")
      ->transform(CLI::CheckedTransformer(strata::OptionValues<strata::IoEngineKind>()));

  int adam_threads = 0;
  bool adam_quick = false;
  CLI::App* bench_adam = bench->add_subcommand(
      "adam", "SIMD CPU Adam params/s vs a same-memory-pattern reference kernel, 50M and 200M");
  bench_adam->add_option("--threads", adam_threads, "threads; 0 = all cores");
  bench_adam->add_flag("--quick", adam_quick, "small sizes (5M, 20M) for a smoke test");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help and the like: CLI11 prints them
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "strata: usage error: %s\n%s", UsageProblem(app, argc, argv, e).c_str(),
                 "run 'strata --help' (or 'strata <command> --help') for the commands and flags\n");
    return 2;
  }

  strata::Status status;
  if (help_config) {
    std::printf("%s", strata::DescribeKeys().c_str());
    return 0;
  }
  if (train->parsed()) status = strata::RunTrain(args);
  else if (sample->parsed()) status = strata::RunSample(sample_args);
  else if (tokenize->parsed()) {
    status = strata::RunTokenize(tokenize_in, tokenize_out, tokenize_spec);
  }
  else if (export_command->parsed()) {
    status = strata::RunExport(export_from, export_to, export_dtype, export_shard,
                               export_merge_lora);
  }
  else if (report->parsed()) status = strata::RunReport(report_metrics, report_trace, report_out);
  else if (plan->parsed()) status = strata::RunPlan(plan_args);
  else if (bench_train->parsed()) status = strata::RunBenchTrain(args);
  else if (bench_plan->parsed()) {
    if (bench_plan->count("--steps") == 0) args.bench_steps = 8;  // quartiles of its steps
    status = strata::RunBenchPlan(args, plan_dir);
  }
  else if (bench_trace->parsed()) {
    if (bench_trace->count("--steps") == 0) args.bench_steps = 20;
    status = strata::RunBenchTrace(args);
  }
  else if (bench_zero->parsed()) status = strata::RunBenchZero(args);
  else if (bench_offload->parsed()) status = strata::RunBenchOffload(args);
  else if (bench_infinity->parsed()) status = strata::RunBenchInfinity(args, infinity_dir);
  else if (bench_gpu->parsed()) {
    if (bench_gpu->count("--steps") == 0) args.bench_steps = 5;
    status = strata::RunBenchGpu(args, gpu_args);
  } else if (bench_import->parsed())
    status = strata::RunBenchImport(args, import_dir, import_file_dtype);
  else if (bench_nvme->parsed()) status = strata::RunBenchNvme(nvme_dir, nvme_size, nvme_engine);
  else if (bench_adam->parsed()) status = strata::RunBenchAdam(adam_threads, adam_quick);
  if (status.code() == absl::StatusCode::kCancelled && strata::StopSignal() != 0) {
    const std::string summary = strata::InterruptSummary();
    if (!summary.empty()) std::fprintf(stderr, "strata: %s\n", summary.c_str());
    return strata::ExitCodeForSignal(strata::StopSignal());
  }
  if (!status.ok()) {
    std::fprintf(stderr, "strata: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
