// `strata train`: one training run from the command line's job to its last step. Parses
// and validates the options, checks the files (inputs before outputs), starts the ranks
// (session/ranks.h), lets them agree on the configuration (session/rank_agreement.h), logs
// it once, then runs TrainingSession::Step (session/session.h) for each step with a
// progress line and an optional JSONL metrics file (session/metrics.h). Between steps the
// ranks agree whether a stop signal arrived (session/interrupt.h); on one they stop
// together, SIGTERM first writing a checkpoint of the last finished step when
// train.checkpoint_dir is set, and return kCancelled with the summary line set for main().
// Thread-safety: called once, from main.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "session/faults.h"

namespace strata {

struct TrainArgs {
  std::string config_path;        // --config FILE.json
  std::vector<std::string> sets;  // --set section.key=value, in order
  std::string metrics_path;       // --metrics FILE.jsonl ("" = none)
  std::string trace_path;         // --trace FILE.json (train.trace_steps; "" = none)
  RunFaults faults;               // the fault suite's (FaultsFromEnvironment)
};

Status RunTrain(const TrainArgs& args);

}  // namespace strata
