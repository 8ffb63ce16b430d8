// `strata bench zero`: for world 2 on the CPU backend (ranks as threads), the step time of
// each ZeRO stage against stage 0 measured in the same run (stages interleaved, twice), and
// the time the compute stream waited on other streams (collectives) as a fraction of the
// step. Goal (DESIGN.md): the compute stream never waits on a transfer that could have
// been issued earlier; the stall fraction shows how close each stage comes.
#include <cstdio>
#include <mutex>

#include "bench/bench_zero.h"
#include "config/options_parse.h"
#include "core/logging.h"
#include "session/ranks.h"
#include "session/session.h"

namespace strata {

Status RunBenchZero(const BenchArgs& args) {
  std::vector<std::string> sets = {"model.preset=small", "train.micro_batch=2",
                                   "train.seq_len=64", "device.threads=1"};
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  sets.push_back("train.eval_every=0");
  sets.push_back("train.steps=1000000");
  sets.push_back("zero.world=2");
  ASSIGN_OR_RETURN(Options base, ParseOptions(args.config_path, sets));
  double step_ms[4] = {0, 0, 0, 0}, stall_ms[4] = {0, 0, 0, 0};
  int measured[4] = {0, 0, 0, 0};
  std::string description;
  for (int round = 0; round < 2; ++round) {
    for (int stage = 0; stage <= 3; ++stage) {
      Options options = base;
      options.zero.stage = stage;
      std::mutex mutex;
      RETURN_IF_ERROR(RunRanks(options, [&](Communicator& communicator) -> Status {
        ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
        RETURN_IF_ERROR(session->Step(0).status());  // warm-up
        for (int i = 0; i < args.steps; ++i) {
          ASSIGN_OR_RETURN(StepReport report, session->Step(1 + i));
          if (communicator.rank() != 0) continue;
          std::lock_guard<std::mutex> lock(mutex);
          step_ms[stage] += report.ms_per_step;
          stall_ms[stage] += report.result.compute_stall_ms;
          ++measured[stage];
        }
        if (communicator.rank() == 0) description = session->model().Describe();
        return absl::OkStatus();
      }));
    }
  }
  std::printf("bench zero: world 2 (local ranks, CPU backend, %d kernel thread(s) each), %s, "
              "micro_batch %d per rank, T=%d, %d measured steps per stage in 2 rounds\n",
              base.device.threads, description.c_str(), base.train.micro_batch,
              base.train.seq_len, 2 * args.steps);
  const double stage0 = step_ms[0] / measured[0];
  for (int stage = 0; stage <= 3; ++stage) {
    const double ms = step_ms[stage] / measured[stage];
    const double stall = stall_ms[stage] / measured[stage];
    std::printf("stage %d: %8.1f ms/step = %.2fx stage 0 | compute stream waited %.1f ms = %.3f "
                "of the step\n",
                stage, ms, ms / stage0, stall, stall / ms);
  }
  return absl::OkStatus();
}

}  // namespace strata
