// Resuming from a checkpoint: every check before any state changes (the metadata against
// the run, then each file's size and XXH3, shared and agreed among the ranks), then each
// unit's fp32 master weights and Adam moments written into the engine, a sharded rank
// reading only its part. 8-bit moments go in as they are where the run keeps 8-bit states
// on the same blocks (an exact resume); fp32 and 8-bit states are converted into each other
// otherwise, said in the log (rank 0). Part of //checkpoint (see checkpoint.h for the layout).
// Thread-safety: LoadCheckpoint is collective (every rank of the engine calls it together).
#pragma once

#include <string>

#include "checkpoint/lora_base.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

// Loads the checkpoint at `path` (a step-<k> directory, or a checkpoint directory: its
// newest complete step-<k>) into the engine.
struct LoadedCheckpoint {
  int next_step = 0;  // k: the next step to run
  std::string path;   // the step-<k> directory loaded
};
// With `show_progress` (one rank), verifying and loading show progress (core/progress.h).
// A LoRA checkpoint loads only into a LoRA run of the same rank, alpha and targets whose
// `base` hashes the same (its base is loaded first, from model.from or train.seed).
// `agree` (the run's host communicator, world > 1): the ranks share the files' check (rank
// r checks files r, r + world, ...; the load still checks each file a rank reads whole)
// and agree on its outcome (AgreeOnOutcomes) before any state changes: when any rank's
// check fails every rank returns an error, the same where the file is the same for all
// (each looks at the failed file itself). A rank that fails before calling it aborts the
// communicator (RunRanks), so the others do not wait.
StatusOr<LoadedCheckpoint> LoadCheckpoint(Engine& engine, const Model& model,
                                          const Options& options, const std::string& path,
                                          bool show_progress = false,
                                          const LoraBase* base = nullptr,
                                          Communicator* agree = nullptr);

}  // namespace strata
