// `strata bench offload`: ZeRO-Offload against the optimizer on the device, in one run, at
// a gpt2-124m-sized step (one rank, stage 2: gradients reduced unit by unit). Four configurations, interleaved twice:
//   device/clip  optimizer on the device, global-norm clipping on (train.grad_clip=1)
//   host/clip    optimizer state and grad shards on the host; clipping on, so every AdamW
//                waits for the global norm and runs after backward
//   device/free  as device/clip without clipping (train.grad_clip=0)
//   host/free    host without clipping: each unit's CPU Adam starts as soon as its
//                gradient shard is on the host, overlapped with the rest of backward (the
//                tied embedding's split: all but its token/position rows right after the
//                LM head's backward)
//   host/delayed host with clipping and zero.param_update=delayed: each step's CPU Adam
//                runs during the next step's forward and backward (not bit-identical to
//                the others: gradients are computed on params one update old)
// Prints step time host / device for each clipping mode, the standalone optimizer time
// (AdamW run time of host/clip, nothing else running) and the exposed optimizer time
// (how long the step end waited for the optimizer after backward) of host/free and
// host/clip as fractions of it. Goal (issue 4): exposed <= 0.10 of standalone.
#include <cstdio>

#include "bench/bench_offload.h"
#include "config/options_parse.h"
#include "core/logging.h"
#include "session/session.h"

namespace strata {
namespace {

struct Config {
  const char* name;
  std::vector<std::string> sets;
};

struct Totals {
  double step_ms = 0, optimizer_ms = 0, exposed_ms = 0;
  int steps = 0;
  double mean(double Totals::*field) const { return steps ? this->*field / steps : 0.0; }
};

}  // namespace

Status RunBenchOffload(const BenchArgs& args) {
  std::vector<std::string> base_sets = {"model.preset=gpt2-124m", "train.micro_batch=4",
                                        "train.seq_len=64"};
  base_sets.insert(base_sets.end(), args.sets.begin(), args.sets.end());
  base_sets.insert(base_sets.end(), {"train.eval_every=0", "train.steps=1000000", "zero.world=1",
                                     "zero.stage=2", "zero.param_tier=device"});
  const std::vector<std::string> host = {"zero.optimizer_tier=host", "zero.grad_tier=host"};
  const std::vector<std::string> device = {"zero.optimizer_tier=device", "zero.grad_tier=device"};
  std::vector<std::string> delayed = host;
  delayed.push_back("zero.param_update=delayed");
  std::vector<Config> configs = {{"device/clip", device}, {"host/clip", host},
                                 {"device/free", device}, {"host/free", host},
                                 {"host/delayed", delayed}};
  for (size_t i = 0; i < configs.size(); ++i) {
    configs[i].sets.push_back(i < 2 || i == 4 ? "train.grad_clip=1" : "train.grad_clip=0");
  }
  std::vector<Totals> totals(configs.size());
  std::string description;
  for (int round = 0; round < 2; ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      std::vector<std::string> sets = base_sets;
      sets.insert(sets.end(), configs[c].sets.begin(), configs[c].sets.end());
      ASSIGN_OR_RETURN(Options options, ParseOptions(args.config_path, sets));
      ASSIGN_OR_RETURN(auto session, TrainingSession::CreateSingleRank(options));
      description = session->model().Describe();
      RETURN_IF_ERROR(session->Step(0).status());  // warm-up
      for (int i = 0; i < args.steps; ++i) {
        ASSIGN_OR_RETURN(StepReport report, session->Step(1 + i));
        totals[c].step_ms += report.ms_per_step;
        totals[c].optimizer_ms += report.result.optimizer_ms;
        totals[c].exposed_ms += report.result.optimizer_exposed_ms;
        ++totals[c].steps;
      }
    }
  }
  ASSIGN_OR_RETURN(Options shown, ParseOptions(args.config_path, base_sets));
  std::printf("bench offload: %s, one rank, stage 2, micro_batch %d, T=%d, %s, CPU backend "
              "(%d kernel thread(s); 0 = all cores), %d measured steps per configuration in 2 "
              "rounds\n",
              description.c_str(), shown.train.micro_batch, shown.train.seq_len,
              DTypeName(shown.train.dtype), shown.device.threads, 2 * args.steps);
  for (size_t c = 0; c < configs.size(); ++c) {
    const Totals& t = totals[c];
    std::printf("%-12s %9.1f ms/step | optimizer ran %7.1f ms | step end waited %7.1f ms\n",
                configs[c].name, t.mean(&Totals::step_ms), t.mean(&Totals::optimizer_ms),
                t.mean(&Totals::exposed_ms));
  }
  const double standalone = totals[1].mean(&Totals::optimizer_ms);
  const double exposed_free = totals[3].mean(&Totals::exposed_ms);
  const double exposed_clip = totals[1].mean(&Totals::exposed_ms);
  std::printf("step time, optimizer on host / on device: %.2fx with clipping, %.2fx without\n",
              totals[1].mean(&Totals::step_ms) / totals[0].mean(&Totals::step_ms),
              totals[3].mean(&Totals::step_ms) / totals[2].mean(&Totals::step_ms));
  std::printf("exposed / standalone optimizer time: %.2f without clipping (overlapped with "
              "backward), %.2f with clipping (AdamW must wait for the global norm)\n",
              exposed_free / standalone, exposed_clip / standalone);
  const double exposed_delayed = totals[4].mean(&Totals::exposed_ms);
  std::printf("with zero.param_update=delayed (clipping on): step time %.2fx of device/clip, "
              "exposed / standalone %.2f\n",
              totals[4].mean(&Totals::step_ms) / totals[0].mean(&Totals::step_ms),
              exposed_delayed / standalone);
  const bool met = exposed_free <= 0.10 * standalone;
  std::printf("goal exposed <= 0.10 of standalone: exact update (without clipping) %s; "
              "delayed update %s\n",
              met ? "MET" : "NOT MET", exposed_delayed <= 0.10 * standalone ? "MET" : "NOT MET");
  if (!met) {
    std::printf(
        "  why: what follows backward is the last units' gradient landing, norm and AdamW "
        "(block 0, the tied embedding's token and position rows); on the CPU backend the "
        "\"device\" compute and the CPU Adam share the same cores, so the AdamW overlapped "
        "with backward runs slower. zero.param_update=delayed hides it all (the norm and the "
        "AdamW run during the next step) at the price of gradients one update old.\n");
  }
  return absl::OkStatus();
}

}  // namespace strata
