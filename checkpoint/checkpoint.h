// Training checkpoints: what a run needs to go on from a step, in a form that does not
// depend on the ZeRO stage, the placement or the world size (a checkpoint written by any
// configuration resumes in any other).
//
// Layout (format 8; docs/checkpoints.md): <train.checkpoint_dir>/step-<k>/ holds
// rank-<r>.bin per rank of the writing run (checkpoint_layout.h: the shard of every
// trainable unit that rank owns, fp32 master, exp_avg and exp_avg_sq over the unit's used
// elements in it, no world padding; with 8-bit Adam states each moment in its stored form,
// as the optimizer keeps it) and checkpoint.json, the manifest, written last:
// {"format": "strata-checkpoint", "version": 8, "next_step": k, "model": {...}, "world",
// "files": [{rank, name, host, bytes, xxh3}], "units": [{"name", "elements", "arrays":
// [{name, dtype "f32", block 0, scales null, shards: [{rank, begin, end, offset}]}]}] (an
// 8-bit moment: dtype q8-dynamic-signed|q8-dynamic-unsigned, block 2048, scales "f32",
// fp32_blocks [[first, end], ...]),
// optionally "train_steps", "tokenizer", "tokenizer_files" (a copy of the tokenizer in
// step-<k>/tokenizer/), "source" (step-<k>/source/), "lora" and "base", and "checksum" (the
// XXH3 of the compact JSON of every other field, keys sorted: a corrupt checkpoint.json is
// kDataLoss, never a misread). Versions 1-5 (unit-<u>.bin per unit, written by rank 0)
// and 6-7 still load. The params are not stored: they are the master cast to train.dtype. The data
// order and learning rate follow from the step.
//
// Every rank writes its own file and syncs it; after an exchange of outcomes and hashes the
// lowest rank on each host writes the manifest (temp file, sync, rename, directory sync);
// after a barrier older checkpoints beyond train.checkpoint_keep are removed. A directory
// without its manifest is not a checkpoint, so a crash at any phase leaves the previous
// one valid. Loading checks the model shape against options.model, every unit's name and
// size, and the files' sizes and XXH3 (each rank those it reads): a mismatch is an error
// naming the key or the file, before any state is changed. Then each rank reads only the
// element ranges it holds (pread across the writing run's rank files). Both calls are
// collective: every rank of the engine calls them together.
//
// This header gathers the checkpoint API; each part has its own header and .cc:
//   checkpoint_write.h      SaveCheckpoint, BackgroundCheckpoint, the fault suite's
//                           CheckpointFault
//   checkpoint_consolidate.h  ConsolidateCheckpoint (rank files into one directory)
//   checkpoint_open.h       OpenCheckpoint, VerifyCheckpointFiles, ReadCheckpointArray
//   checkpoint_load.h       LoadCheckpoint (resuming)
//   checkpoint_tokenizer.h  the copy of the run's tokenizer (CheckpointTokenizer)
//   checkpoint_source.h     what it keeps of the model's source (its special-token ids,
//                           generation_config.json)
//   checkpoint_dir.h        LatestCheckpoint, RemovePartialCheckpoints, CheckRoomForCheckpoint
//   lora_base.h             LoraBase, BaseHash, BaseHasher
//   moment_blocks.h         MomentBlocks (which blocks of an 8-bit moment array are 8-bit)
// and, internal to the library, checkpoint_format.h (checkpoint.json's vocabulary),
// checkpoint_layout.h (what each rank's file holds) and checkpoint_files.h (the file helpers).
// Thread-safety: see each header.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_consolidate.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_load.h"
#include "checkpoint/checkpoint_open.h"
#include "checkpoint/checkpoint_source.h"
#include "checkpoint/checkpoint_tokenizer.h"
#include "checkpoint/checkpoint_write.h"
#include "checkpoint/lora_base.h"
#include "checkpoint/moment_blocks.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"
