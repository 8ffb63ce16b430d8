// Training checkpoints: what a run needs to go on from a step, in a form that does not
// depend on the ZeRO stage, the placement or the world size (a checkpoint written by any
// configuration resumes in any other).
//
// Layout: <train.checkpoint_dir>/step-<k>/ holds checkpoint.json and unit-<u>.bin per
// model unit: the unit's fp32 master weights, exp_avg and exp_avg_sq over its used
// elements (UnitLayout::used_elements, no world padding), one array after the other,
// little-endian. checkpoint.json: {"format": "strata-checkpoint", "version": 5,
// "next_step": k, "model": {family, layers, heads, kv_heads, head_dim, channels, ffn_hidden, vocab,
// padded_vocab, max_seq_len, rope_theta, norm_eps, rope_scaling, tie_embeddings, qkv_bias,
// sliding_window}
// (keys a checkpoint of an older strata lacks take the value a GPT of its shape had;
// version 4 added rope_scaling, qkv_bias and sliding_window, version 5 head_dim and qk_norm, so
// that an older strata refuses such a model), "units":
// [{"name", "elements", "file", "xxh3"}], optionally "train_steps" (the writing run's
// train.steps: a resume with another is said in the log; an older strata ignores it),
// optionally "tokenizer" (the spec the run's text
// went through: an older strata ignores it) and "tokenizer_files" ([{"name", "xxh3"}]: the
// copy of that tokenizer's files in step-<k>/tokenizer/, under their Hugging Face names, so
// that a checkpoint moved to another machine samples and exports with its own tokenizer),
// optionally "source" (model.from=hf:DIR: {"from", its config.json's bos_token_id,
// eos_token_id and pad_token_id as written, "files": [{"name": "generation_config.json",
// "xxh3"}]}, the copy in step-<k>/source/, so that an export writes them; an older strata
// ignores it),
// "checksum"}, where "checksum" is the XXH3 (hex)
// of the compact JSON of every other field (keys sorted): a corrupt checkpoint.json is
// kDataLoss, never a misread. Version 1 (no checksum) still loads; others are refused
// naming the version. The params are not stored: they are the master
// cast to train.dtype. The data order and learning rate follow from the step.
//
// Rank 0 writes into step-<k>.partial and renames it to step-<k> once every file is
// synced, so a crash never leaves a half-written step-<k> (an older one is replaced);
// with train.checkpoint_keep=N it then removes all but the newest N step-<k>.
// Loading checks the model shape against options.model, every unit's name and size, and
// every file's size and XXH3: a mismatch is an error naming the key or the file, before
// any state is changed. Then a rank that stores a unit's shard (stage 3 on several ranks)
// reads only its part of each array; one that stores it whole reads and checks it again.
// Both calls are collective: every rank of the engine calls them together.
//
// This header gathers the checkpoint API; each part has its own header and .cc:
//   checkpoint_write.h      SaveCheckpoint, the fault suite's CheckpointFault
//   checkpoint_open.h       OpenCheckpoint, VerifyCheckpointFiles, ReadCheckpointMaster
//   checkpoint_load.h       LoadCheckpoint (resuming)
//   checkpoint_tokenizer.h  the copy of the run's tokenizer (CheckpointTokenizer)
//   checkpoint_source.h     what it keeps of the model's source (its special-token ids,
//                           generation_config.json)
//   checkpoint_dir.h        LatestCheckpoint, RemovePartialCheckpoints, CheckRoomForCheckpoint
//   lora_base.h             LoraBase, BaseHash, BaseHasher
// and, internal to the library, checkpoint_format.h (checkpoint.json's vocabulary) and
// checkpoint_files.h (the file helpers). Thread-safety: see each header.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_load.h"
#include "checkpoint/checkpoint_open.h"
#include "checkpoint/checkpoint_source.h"
#include "checkpoint/checkpoint_tokenizer.h"
#include "checkpoint/checkpoint_write.h"
#include "checkpoint/lora_base.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"
