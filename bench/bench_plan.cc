// `strata bench plan`: the plan's predictions against runs of the same configurations on
// this machine. The job (default: the small preset, T=128, micro-batch 4, one rank) is
// planned with a probe of this machine (GEMM and attention shapes timed), then each
// configuration of the decision order trains for --steps steps after a warm-up step in a
// single-rank session; the median step is compared with the predicted one, and the device
// and host peaks with the dry run's. Goal: every configuration's step within 20% of its
// prediction on the CPU backend (the ratio is printed, the goal's verdict last).
// A shared machine's speed moves by a third over minutes (other tenants), more than the
// model's error, so the machine is probed again between the configurations' runs, and
// each run is compared with the mean of the predictions of the probes just before and just
// after it (the plan's own first prediction is printed beside it, and how far the two
// bracketing probes differ: the machine's drift during the run). A run that drifted more
// than 10%, or whose steps spread more than that, is repeated (three attempts at most; the
// steadiest is kept, marked "!" when still unsteady).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_plan.h"
#include "config/options_parse.h"
#include "core/cpu_info.h"
#include "plan/plan.h"
#include "plan/plan_probe.h"
#include "session/session.h"

namespace strata {
namespace {

// Bracketing probes further apart than this (as a ratio of their predictions), or a run's
// steps spread wider (upper quartile / lower quartile), mean the machine changed speed
// during the run; such a run is repeated, up to kAttempts in all.
constexpr double kSteady = 0.10;
constexpr int kAttempts = 3;

}  // namespace

Status RunBenchPlan(const BenchArgs& args, const std::string& dir) {
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
  // A probe of the machine as it is now: its rates and the seconds of every shape that a
  // runnable configuration computes.
  struct Probe {
    Hardware hardware;
    std::map<std::array<int, 6>, double> shape_seconds;
  };
  auto shapes_of = [&](Hardware rates, ShapeTimer& shapes) -> StatusOr<Probe> {
    Probe now;
    now.hardware = std::move(rates);
    for (const PlannedConfig& c : plan.configs) {
      if (!c.status.ok()) continue;
      for (const auto& [shape, calls] : c.dry.device_ops.shapes) {
        ASSIGN_OR_RETURN(now.shape_seconds[shape],
                         shapes.SecondsPerCall(c.options.train.dtype, shape));
      }
    }
    return now;
  };
  auto probe = [&]() -> StatusOr<Probe> {
    ASSIGN_OR_RETURN(Hardware rates, ProbeHardware(job, 1));
    ShapeTimer fresh(job);
    return shapes_of(std::move(rates), fresh);
  };
  auto predict = [](const PlannedConfig& c, const Probe& at) {
    return PredictStep(c.dry, c.options, at.hardware, &at.shape_seconds).seconds;
  };
  std::printf("%-30s %10s %10s %7s %9s %7s %9s %9s\n", "configuration", "predicted", "measured",
              "ratio", "first", "drift", "device", "host");
  int met = 0, measured = 0;
  // The first run's "before" is the plan's own probe (its shapes timed already).
  ASSIGN_OR_RETURN(Probe before, shapes_of(hardware, timer));
  for (const PlannedConfig& c : plan.configs) {
    if (!c.status.ok()) {
      std::printf("%-30s cannot run: %s\n", c.config.name.c_str(),
                  std::string(c.status.message()).c_str());
      continue;
    }
    Options options = c.options;
    options.train.steps = 1 + args.steps;
    // A run whose bracketing probes differ by more than kSteady, or whose own steps spread
    // more than that (upper quartile / lower), saw the machine change speed: it is run
    // again (up to kAttempts in all), and the steadiest attempt is kept.
    struct Attempt {
      double median_s = 0, spread = 1, first = 0, last = 0;  // spread: steps' q3 / q1
      PoolStats device, host;
      double drift() const { return last / first; }
      double unsteadiness() const {
        return std::max(std::fabs(std::log(drift())), std::log(spread));
      }
    };
    std::optional<Attempt> kept;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      Attempt run;
      std::vector<double> ms;
      {
        ASSIGN_OR_RETURN(auto session, TrainingSession::CreateSingleRank(options));
        for (int step = 0; step < options.train.steps; ++step) {
          ASSIGN_OR_RETURN(StepReport report, session->Step(step));
          if (step > 0) ms.push_back(report.ms_per_step);
        }
        run.device = session->device().pool(Tier::kDevice).Stats();
        run.host = session->device().pool(Tier::kHost).Stats();
      }
      ASSIGN_OR_RETURN(Probe after, probe());
      std::sort(ms.begin(), ms.end());
      run.median_s = ms[ms.size() / 2] / 1000.0;
      run.spread = ms[3 * (ms.size() - 1) / 4] / ms[(ms.size() - 1) / 4];
      run.first = predict(c, before);
      run.last = predict(c, after);
      before = std::move(after);
      if (!kept || run.unsteadiness() < kept->unsteadiness()) kept = run;
      if (kept->unsteadiness() <= std::log(1 + kSteady)) break;
    }
    const double predicted = (kept->first + kept->last) / 2;
    const double ratio = kept->median_s / predicted;
    auto share = [](uint64_t predicted, uint64_t real) {
      return real == 0 ? (predicted == 0 ? 1.0 : INFINITY) : double(predicted) / double(real);
    };
    const bool steady = kept->unsteadiness() <= std::log(1 + kSteady);
    std::printf("%-30s %9.3fs %9.3fs %7.2f %8.3fs %7.2f%s %9.3f %9.3f\n", c.config.name.c_str(),
                predicted, kept->median_s, ratio, c.step.seconds, kept->drift(),
                steady ? " " : "!", share(c.dry.device.peak_bytes, kept->device.peak_bytes),
                share(c.dry.host.peak_bytes, kept->host.peak_bytes));
    ++measured;
    if (std::fabs(ratio - 1.0) <= 0.2) ++met;
  }
  std::printf("(predicted: the mean of the probes before and after the run; ratio = measured / "
              "predicted step; first: the plan's prediction from the first probe; drift: the "
              "after probe's prediction / the before probe's, ! when it or the steps' quartiles "
              "stayed more than 10%% apart after three attempts; "
              "device, host = predicted / measured peak)\n");
  std::printf("goal: every step within 20%% of its prediction: %s (%d of %d)\n",
              met == measured ? "met" : "NOT met", met, measured);
  return absl::OkStatus();
}

}  // namespace strata
