// `strata bench checkpoint` (bench/bench_checkpoint.cc): what a checkpoint costs training,
// written synchronously (with fsync) and in the background (train.checkpoint_async).
// Thread-safety: called once, from main (or a test).
#pragma once

#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

// The figures, each a median over the rounds (per-round values paired with the round's
// run without checkpoints, so that a drift of the machine between rounds cancels out).
struct CheckpointBenchFigures {
  int rounds = 0;
  int steps_per_round = 0;
  uint64_t checkpoint_bytes = 0;  // one rank file (world 1)
  double none_round_ms = 0.0;       // a round of steps without checkpoints
  double sync_write_ms = 0.0;       // the synchronous checkpoint (write, fsync, manifest)
  double sync_extra_ms = 0.0;       // a synchronous round over a round without
  double background_extra_ms = 0.0; // a background round over a round without
  double background_stall_ms = 0.0; // the time training waited: snapshot and completion
  double background_slowed_ms = 0.0;  // extra - stall: the steps slowed by the writer
  std::vector<std::string> last_checkpoints;  // per mode with checkpoints: sync, background
};

// Trains `args.steps` steps per round and mode (a single-rank session per mode: no
// checkpoints, synchronous, background; the modes take turns, `rounds` rounds). Each
// round's first step is a checkpoint step (train.checkpoint_every = args.steps), so the
// background writer runs during the round's other steps; whatever is still pending at the
// round's end is completed inside it (a stall). Checkpoints go to <dir>/sync and
// <dir>/background (train.checkpoint_keep=1).
StatusOr<CheckpointBenchFigures> MeasureCheckpointCost(const BenchArgs& args,
                                                       const std::string& dir, int rounds);

// The measurement, printed with the CPU model, and whether the goal (extra / synchronous
// write <= 0.1) is met.
Status RunBenchCheckpoint(const BenchArgs& args, const std::string& dir, int rounds);

}  // namespace strata
