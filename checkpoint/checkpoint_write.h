// Writing a checkpoint: the state before a step, written by rank 0 into step-<k>.partial
// and renamed to step-<k> once every file is synced (a crash never leaves a half-written
// step-<k>; a failure removes the partial directory), then the older ones beyond
// train.checkpoint_keep removed; and the fault the fault suite injects into the writer.
// Part of //checkpoint (see checkpoint.h for the layout).
// Thread-safety: SaveCheckpoint is collective (every rank of the engine calls it together);
// one checkpoint is written into a directory at a time.
#pragma once

#include <optional>
#include <string>

#include "checkpoint/lora_base.h"
#include "core/options.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

// A fault the fault suite injects into the checkpoint writer (STRATA_FAULT_CHECKPOINT,
// read once at the top of the program): just after unit `unit`'s file of the checkpoint of
// step `step` was written, kKill raises SIGKILL (a process killed mid-checkpoint), kEnospc
// fails as a full disk would.
struct CheckpointFault {
  enum class Action { kKill, kEnospc };
  Action action = Action::kKill;
  int step = 0;
  int unit = 0;
};
// "kill|enospc@STEP:UNIT"; "" is none; anything else kInvalidArgument naming the text.
StatusOr<std::optional<CheckpointFault>> ParseCheckpointFault(const std::string& text);

// Writes the state before step `next_step` to <options.train.checkpoint_dir>/step-<k>
// (rank 0 writes when `write`, showing progress: core/progress.h); returns that path.
// Only trainable units are written; a LoRA run (`base` given) records its base.
// `tokenizer` (TrainingTokenizer; "" none) is recorded for sample and export, and what the
// checkpoint keeps of options.model.from (checkpoint_source.h) for export. `fault`
// (may be null): the fault suite's.
StatusOr<std::string> SaveCheckpoint(Engine& engine, const Model& model, const Options& options,
                                     int next_step, bool write, const LoraBase* base = nullptr,
                                     const std::string& tokenizer = "",
                                     const CheckpointFault* fault = nullptr);

}  // namespace strata
