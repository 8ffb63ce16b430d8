// `strata bench train`: step time split into forward / backward / optimizer, tokens/s and
// achieved GFLOP/s (6 x params x tokens) for fp32 and bf16, measured alternately in the
// same process together with this machine's fp32 FMA peak (kernels/cpu/peak.h), so every
// figure is a same-run ratio. Goals: fp32 >= 60% of the peak; bf16 >= 1.6x fp32 tokens/s.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/bench_train.h"
#include "config/options_parse.h"
#include "core/logging.h"
#include "kernels/cpu/peak.h"
#include "session/session.h"

namespace strata {
namespace {

struct Totals {
  double step_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  int steps = 0;
};

void Add(Totals& t, const StepReport& r) {
  t.step_ms += r.ms_per_step;
  t.forward_ms += r.result.forward_ms;
  t.backward_ms += r.result.backward_ms;
  t.optimizer_ms += r.result.optimizer_ms;
  ++t.steps;
}

}  // namespace

Status RunBenchTrain(const BenchArgs& args) {
  std::vector<std::string> sets = args.sets;
  sets.push_back("train.eval_every=0");
  sets.push_back("train.steps=1000000");  // a flat LR schedule; the bench runs few steps
  ASSIGN_OR_RETURN(Options base, ParseOptions(args.config_path, sets));
  InitLogging(0, 1);
  const DType dtypes[2] = {DType::kF32, DType::kBF16};
  std::unique_ptr<TrainingSession> sessions[2];
  for (int d = 0; d < 2; ++d) {
    Options options = base;
    options.train.dtype = dtypes[d];
    ASSIGN_OR_RETURN(sessions[d], TrainingSession::CreateSingleRank(options));
  }
  const int threads = base.device.threads > 0 ? base.device.threads : 0;
  std::printf("bench train: %s, B=%d T=%d grad_accum=%d, %d measured steps per dtype\n",
              sessions[0]->model().Describe().c_str(), base.train.micro_batch,
              base.train.seq_len, base.train.grad_accum, args.steps);
  // Warm-up: first steps allocate oneDNN primitives and touch memory.
  for (int d = 0; d < 2; ++d) RETURN_IF_ERROR(sessions[d]->Step(0).status());
  Totals totals[2];
  std::vector<double> peaks;
  for (int i = 0; i < args.steps; ++i) {
    peaks.push_back(cpu::MeasureFp32FmaPeakGflops(threads, 0.25));
    for (int d = 0; d < 2; ++d) {
      ASSIGN_OR_RETURN(StepReport report, sessions[d]->Step(i + 1));
      Add(totals[d], report);
    }
  }
  peaks.push_back(cpu::MeasureFp32FmaPeakGflops(threads, 0.25));
  const double peak = *std::max_element(peaks.begin(), peaks.end());
  const double flops_per_step = 6.0 * sessions[0]->num_params() * sessions[0]->tokens_per_step();
  double tokens_per_s[2];
  for (int d = 0; d < 2; ++d) {
    const Totals& t = totals[d];
    const double ms = t.step_ms / t.steps;
    tokens_per_s[d] = sessions[d]->tokens_per_step() / (ms / 1000.0);
    const double gflops = flops_per_step / (ms / 1000.0) / 1e9;
    std::printf("%s: %.1f ms/step (forward %.1f, backward %.1f, optimizer %.1f) | %.0f tokens/s | "
                "%.1f GFLOP/s = %.2f of fp32 peak\n",
                DTypeName(dtypes[d]), ms, t.forward_ms / t.steps, t.backward_ms / t.steps,
                t.optimizer_ms / t.steps, tokens_per_s[d], gflops, gflops / peak);
  }
  const double fp32_fraction =
      flops_per_step / (totals[0].step_ms / totals[0].steps / 1000.0) / 1e9 / peak;
  const double bf16_speedup = tokens_per_s[1] / tokens_per_s[0];
  std::printf("fp32 FMA peak measured in this run (%s, %s threads): %.0f GFLOP/s\n",
              cpu::Fp32FmaPeakIsaName(), threads == 0 ? "all" : std::to_string(threads).c_str(),
              peak);
  std::printf("goal fp32 >= 0.60 of peak: %.2f -> %s\n", fp32_fraction,
              fp32_fraction >= 0.60 ? "met" : "NOT met");
  std::printf("goal bf16 >= 1.6x fp32 tokens/s: %.2fx -> %s\n", bf16_speedup,
              bf16_speedup >= 1.6 ? "met" : "NOT met");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (bf16_speedup < 1.6 && !avx512) {
    std::printf("  why: this CPU has no AVX-512, so oneDNN 2.6 has no bf16 GEMM and bf16 runs fp32 "
                "GEMMs on widened values (kernels/cpu/matmul.h): it cannot beat fp32 here\n");
  }
  return absl::OkStatus();
}

}  // namespace strata
