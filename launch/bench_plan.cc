// `strata bench plan`: the plan's predictions against runs of the same configurations on
// this machine. The job (default: the small preset, T=128, micro-batch 4, one rank) is
// planned with a probe of this machine (GEMM and attention shapes timed), then each
// configuration of the decision order trains for --steps steps after a warm-up step in a
// single-rank session; the median step is compared with the predicted one, and the device
// and host peaks with the dry run's. Goal: every configuration's step within 20% of its
// prediction on the CPU backend (the ratio is printed, the goal's verdict last).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_info.h"
#include "launch/commands.h"
#include "launch/options_parse.h"
#include "launch/plan.h"
#include "launch/plan_probe.h"
#include "launch/session.h"

namespace strata {

Status RunBenchPlan(const CommandArgs& args, const std::string& dir) {
  std::vector<std::string> sets = {"model.preset=small", "train.seq_len=128",
                                   "train.micro_batch=4", "train.grad_accum=1",
                                   "train.eval_every=0", "train.log_every=1000"};
  const char* tmp = std::getenv("TMPDIR");
  sets.push_back("zero.nvme_dir=" + (dir.empty() ? std::string(tmp != nullptr ? tmp : "/tmp") : dir));
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  ASSIGN_OR_RETURN(const Options job, ParseOptions(args.config_path, sets));
  std::printf("bench plan on %s: predicted vs measured step of each configuration\n",
              DescribeCpu().c_str());
  ASSIGN_OR_RETURN(const Hardware hardware, ProbeHardware(job, 1));
  ShapeTimer timer(job);
  ASSIGN_OR_RETURN(const Plan plan, MakePlan(job, 1, hardware, &timer));
  std::printf("%-30s %10s %10s %7s %9s %9s\n", "configuration", "predicted", "measured",
              "ratio", "device", "host");
  int met = 0, measured = 0;
  for (const PlannedConfig& c : plan.configs) {
    if (!c.status.ok()) {
      std::printf("%-30s cannot run: %s\n", c.config.name.c_str(),
                  std::string(c.status.message()).c_str());
      continue;
    }
    Options options = c.options;
    options.train.steps = 1 + args.bench_steps;
    ASSIGN_OR_RETURN(auto session, TrainingSession::CreateSingleRank(options));
    std::vector<double> ms;
    for (int step = 0; step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(StepReport report, session->Step(step));
      if (step > 0) ms.push_back(report.ms_per_step);
    }
    std::sort(ms.begin(), ms.end());
    const double median_s = ms[ms.size() / 2] / 1000.0;
    const double ratio = median_s / c.step.seconds;
    const PoolStats device = session->device().pool(Tier::kDevice).Stats();
    const PoolStats host = session->device().pool(Tier::kHost).Stats();
    auto share = [](uint64_t predicted, uint64_t real) {
      return real == 0 ? (predicted == 0 ? 1.0 : INFINITY) : double(predicted) / double(real);
    };
    std::printf("%-30s %9.3fs %9.3fs %7.2f %9.3f %9.3f\n", c.config.name.c_str(),
                c.step.seconds, median_s, ratio,
                share(c.dry.device.peak_bytes, device.peak_bytes),
                share(c.dry.host.peak_bytes, host.peak_bytes));
    ++measured;
    if (std::fabs(ratio - 1.0) <= 0.2) ++met;
  }
  std::printf("(ratio = measured / predicted step; device, host = predicted / measured peak)\n");
  std::printf("goal: every step within 20%% of its prediction: %s (%d of %d)\n",
              met == measured ? "met" : "NOT met", met, measured);
  return absl::OkStatus();
}

}  // namespace strata
