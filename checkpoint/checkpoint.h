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
// [{"name", "elements", "file", "xxh3"}], optionally "tokenizer" (the spec the run's text
// went through: an older strata ignores it) and "tokenizer_files" ([{"name", "xxh3"}]: the
// copy of that tokenizer's files in step-<k>/tokenizer/, under their Hugging Face names, so
// that a checkpoint moved to another machine samples and exports with its own tokenizer),
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
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"

struct XXH3_state_s;

namespace strata {

// A LoRA run's base, as its checkpoints refer to it (they hold the adapters alone): where it
// came from (model.from, or "" with the seed of its random init) and the XXH3 (hex) of
// its params as training used them (BaseHash).
struct LoraBase {
  std::string from;
  uint64_t seed = 0;
  DType dtype = DType::kF32;  // train.dtype: the params hashed are the base in this dtype
  std::string xxh3;
};
// The XXH3 of every frozen unit's params (compute dtype widened to fp32, used elements, in
// unit order). Collective (Engine::ReadParams gathers shards); one unit in memory at a time.
StatusOr<std::string> BaseHash(Engine& engine, const Model& model);
// The same hash fed unit by unit from elsewhere (a base made again from its source: export,
// sample): each base unit's used elements, in unit order.
class BaseHasher {
 public:
  BaseHasher();
  void Add(const float* values, size_t count);
  void Add(const std::vector<float>& values) { Add(values.data(), values.size()); }
  std::string Hex() const;  // 16 hex digits

 private:
  std::unique_ptr<XXH3_state_s, void (*)(XXH3_state_s*)> state_;
};

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
// `tokenizer` (TrainingTokenizer; "" none) is recorded for sample and export. `fault`
// (may be null): the fault suite's.
StatusOr<std::string> SaveCheckpoint(Engine& engine, const Model& model, const Options& options,
                                     int next_step, bool write, const LoraBase* base = nullptr,
                                     const std::string& tokenizer = "",
                                     const CheckpointFault* fault = nullptr);

// The newest complete step-<k> directory under `dir`, or "".
std::string LatestCheckpoint(const std::string& dir);

// Bytes a checkpoint of `model` takes (its unit files and the metadata, with slack).
uint64_t CheckpointBytes(const Model& model);

// Removes every step-<k>.partial directory under `dir` (left by a process killed while
// writing a checkpoint); returns their paths.
std::vector<std::string> RemovePartialCheckpoints(const std::string& dir);

// OK when the filesystem of `dir` has `bytes` free; else kResourceExhausted naming the
// directory, the bytes needed and free (checked before a checkpoint writes anything).
Status CheckRoomForCheckpoint(const std::string& dir, uint64_t bytes);

// A checkpoint opened outside training (export): checkpoint.json read and checked (format,
// version, checksum); the model's shape (keys a version lacked take their GPT values).
struct OpenedCheckpoint {
  std::string path;  // the step-<k> directory
  int next_step = 0;
  ModelOptions model;  // resolved: no "0 = default" values
  struct Unit {
    std::string name, file;
    size_t elements = 0;  // used elements (no world padding)
    std::string hash;     // XXH3 of the file, hex
  };
  std::vector<Unit> units;  // the trainable units' (a LoRA checkpoint: the adapters')
  // A LoRA checkpoint (version 3): lora.rank > 0, alpha and the targets (strata names,
  // comma-separated), and its base.
  LoraOptions lora;
  LoraBase base;
  // The tokenizer the run's text went through (a spec as data.tokenizer takes it, paths
  // absolute), or "" where not known (token-file data, or a checkpoint written before
  // strata recorded it).
  std::string tokenizer;
  // The copy of that tokenizer's files the checkpoint holds (in its directory "tokenizer",
  // under their Hugging Face names), as (path, XXH3 hex); none in a checkpoint written
  // before strata copied them, or when they were not readable when it was written.
  std::vector<std::pair<std::string, std::string>> tokenizer_files;
};
StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& path);
// The tokenizer to sample or export a checkpoint with: its own copy ("hf:<step-k>/tokenizer",
// each file checked against its XXH3: kDataLoss naming a file that differs) where it has
// one, else the recorded spec ("" where none was recorded).
StatusOr<std::string> CheckpointTokenizer(const OpenedCheckpoint& checkpoint);
// Every unit file's size and XXH3 against checkpoint.json (streamed, one unit in memory);
// with `world` > 1 only files rank, rank + world, ... (this rank's share); `failed` (may be
// null) gets the index of the file that failed.
Status VerifyCheckpointFiles(const OpenedCheckpoint& checkpoint, bool show_progress, int rank = 0,
                             int world = 1, int* failed = nullptr);
// Elements [begin, begin + count) of unit `unit`'s fp32 master weights (pread).
Status ReadCheckpointMaster(const OpenedCheckpoint& checkpoint, int unit, size_t begin,
                            size_t count, float* out);

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
