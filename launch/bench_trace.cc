// `strata bench trace`: what the timeline trace costs. Three single-rank sessions of one
// configuration (default: the small preset, stage 3, the optimizer on the host, so compute,
// comm, copy and CPU Adam tracks all carry spans) take turns step by step: without a trace
// (`strata train` without --trace), with a trace that is not recording (--trace outside
// train.trace_steps), and recording every step. Figures: the median step time of each and
// the two overheads as ratios to the untraced median. Goals: off (not recording) costs
// nothing measurable (<= 1%, the noise floor of a shared machine), on costs <= 3%.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/cpu_info.h"
#include "core/logging.h"
#include "launch/commands.h"
#include "launch/options_parse.h"
#include "launch/session.h"

namespace strata {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

Status RunBenchTrace(const CommandArgs& args) {
  std::vector<std::string> sets = {"model.preset=small", "zero.stage=3",
                                   "zero.optimizer_tier=host", "train.micro_batch=4",
                                   "train.seq_len=128"};
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  sets.push_back("train.eval_every=0");
  sets.push_back("train.steps=1000000");  // a flat LR schedule; the bench runs few steps
  ASSIGN_OR_RETURN(Options base, ParseOptions(args.config_path, sets));
  InitLogging(0, 1);
  const char* kNames[3] = {"no trace", "trace, not recording", "trace, recording"};
  std::unique_ptr<TrainingSession> sessions[3];
  for (int k = 0; k < 3; ++k) {
    Options options = base;
    options.train.trace_steps = k == 2 ? "1:1000000" : "999999:1000000";
    ASSIGN_OR_RETURN(sessions[k], TrainingSession::CreateSingleRank(options, k > 0));
  }
  std::printf("bench trace: %s, %s, B=%d T=%d stage %d, %d measured steps per session\n",
              DescribeCpu().c_str(), sessions[0]->model().Describe().c_str(),
              base.train.micro_batch, base.train.seq_len, base.zero.stage, args.bench_steps);
  for (int k = 0; k < 3; ++k) RETURN_IF_ERROR(sessions[k]->Step(0).status());  // warm-up
  std::vector<double> ms[3];
  for (int i = 0; i < args.bench_steps; ++i) {
    for (int k = 0; k < 3; ++k) {  // rotating who goes first evens out drifts
      const int s = (k + i) % 3;
      ASSIGN_OR_RETURN(const StepReport report, sessions[s]->Step(i + 1));
      ms[s].push_back(report.ms_per_step);
    }
  }
  const double base_ms = Median(ms[0]);
  for (int k = 0; k < 3; ++k) {
    std::printf("  %-22s %8.2f ms/step (median)\n", kNames[k], Median(ms[k]));
  }
  const Trace& trace = *sessions[2]->trace();
  std::printf("  recorded: %llu events over %d steps (%.0f per step)\n",
              static_cast<unsigned long long>(trace.events()), args.bench_steps + 1,
              trace.events() / (args.bench_steps + 1.0));
  const double off = Median(ms[1]) / base_ms - 1.0, on = Median(ms[2]) / base_ms - 1.0;
  std::printf("trace off (not recording) vs none: %+.1f%% (goal <= 1%%: %s)\n", off * 100,
              off <= 0.01 ? "MET" : "NOT MET");
  std::printf("trace on (recording) vs none:      %+.1f%% (goal <= 3%%: %s)\n", on * 100,
              on <= 0.03 ? "MET" : "NOT MET");
  return absl::OkStatus();
}

}  // namespace strata
