// A checkpoint directory (train.checkpoint_dir) as a whole: its newest complete step-<k>,
// the step-<k>.partial directories a killed writer left, the room a checkpoint needs and
// whether the filesystem has it. Part of //checkpoint (see checkpoint.h for the layout).
// Thread-safety: reentrant; RemovePartialCheckpoints must not run while a checkpoint is
// being written into the same directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model.h"

namespace strata {

// The newest complete step-<k> directory under `dir`, or "".
std::string LatestCheckpoint(const std::string& dir);

// The step-<k> directory train.resume names: `path` itself when it holds checkpoint.json,
// else the newest complete step-<k> under it; kNotFound naming the path otherwise.
StatusOr<std::string> ResolveCheckpointPath(const std::string& path);

// Bytes a checkpoint of `model` takes (its unit files and the metadata, with slack).
uint64_t CheckpointBytes(const Model& model);

// Removes every incomplete checkpoint under `dir` (left by a process killed while writing
// one): a step-<k> without its checkpoint.json, and the step-<k>.partial of versions 1-5;
// returns their paths. Run by each node's lead rank, before any checkpoint is written.
std::vector<std::string> RemovePartialCheckpoints(const std::string& dir);

// OK when the filesystem of `dir` has `bytes` free; else kResourceExhausted naming the
// directory, the bytes needed and free (checked before a checkpoint writes anything).
Status CheckRoomForCheckpoint(const std::string& dir, uint64_t bytes);

}  // namespace strata
