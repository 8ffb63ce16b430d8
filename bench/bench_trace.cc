// `strata bench trace`: what the timeline trace costs. Three single-rank sessions of one
// configuration (default: the small preset, stage 3, the optimizer on the host, so compute,
// comm, copy and CPU Adam tracks all carry spans) take turns step by step: without a trace
// (`strata train` without --trace), with a trace that is not recording (--trace outside
// train.trace_steps), and recording every step. Figures: the median step time of each and
// the two overheads as ratios to the untraced median. On a shared 2-core machine those
// medians move by a few percent from run to run, so the bench also measures the trace's
// own work directly: the cost of recording one labelled span (a label set, two tasks of a
// stream, the span closed) and of an enqueue while not recording, each times the events
// per step, over the step time. Goals: off (not recording) costs nothing measurable
// (<= 1%), on costs <= 3%; judged on the direct figures, the medians shown beside them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/bench_trace.h"
#include "config/options_parse.h"
#include "device/cpu_device.h"
#include "core/cpu_info.h"
#include "device/device.h"
#include "core/logging.h"
#include "core/trace.h"
#include "session/session.h"

namespace strata {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

enum class TraceMode { kNone, kOff, kOn };

// Microseconds per label of two empty tasks on a CPU stream: without a trace (kNone), with
// one not recording (kOff) or recording (kOn); the mean of `rounds`.
double MicrosecondsPerSpan(TraceMode mode, int rounds) {
  auto device = CreateCpuDevice({});
  Trace trace;
  if (mode != TraceMode::kNone) device->SetTrace(&trace);
  trace.SetRecording(mode == TraceMode::kOn);
  auto stream = device->CreateStream("compute").value();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    StreamLabel label(*stream, "forward h" + std::to_string(i % 12), "forward",
                      {{"bytes", "4096"}});
    stream->EnqueueHost([] { return absl::OkStatus(); });
    stream->EnqueueHost([] { return absl::OkStatus(); });
  }
  stream->Synchronize().IgnoreError();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  device->SetTrace(nullptr);
  return us / rounds;
}

}  // namespace

Status RunBenchTrace(const BenchArgs& args) {
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
              base.train.micro_batch, base.train.seq_len, base.zero.stage, args.steps);
  for (int k = 0; k < 3; ++k) RETURN_IF_ERROR(sessions[k]->Step(0).status());  // warm-up
  std::vector<double> ms[3];
  for (int i = 0; i < args.steps; ++i) {
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
  const double events_per_step = trace.events() / (args.steps + 1.0);
  std::printf("  recorded: %llu events over %d steps (%.0f per step)\n",
              static_cast<unsigned long long>(trace.events()), args.steps + 1,
              events_per_step);
  // The direct measure, against a stream running the same empty work untraced.
  constexpr int kRounds = 20000;
  const double none_us = MicrosecondsPerSpan(TraceMode::kNone, kRounds);
  const double plain_us = MicrosecondsPerSpan(TraceMode::kOff, kRounds);
  const double recording_us = MicrosecondsPerSpan(TraceMode::kOn, kRounds);
  std::printf("  per labelled span (2 tasks): %.2f us untraced, %.2f us not recording, "
              "%.2f us recording\n", none_us, plain_us, recording_us);
  const double off_direct = std::max(0.0, plain_us - none_us) * events_per_step / (base_ms * 1e3);
  const double on_direct =
      std::max(0.0, recording_us - none_us) * events_per_step / (base_ms * 1e3);
  const double off = Median(ms[1]) / base_ms - 1.0, on = Median(ms[2]) / base_ms - 1.0;
  std::printf("trace off (not recording): %.3f%% of the step measured directly, %+.1f%% by "
              "medians (goal <= 1%%: %s)\n", off_direct * 100, off * 100,
              off_direct <= 0.01 ? "MET" : "NOT MET");
  std::printf("trace on (recording):      %.3f%% of the step measured directly, %+.1f%% by "
              "medians (goal <= 3%%: %s)\n", on_direct * 100, on * 100,
              on_direct <= 0.03 ? "MET" : "NOT MET");
  return absl::OkStatus();
}

}  // namespace strata
