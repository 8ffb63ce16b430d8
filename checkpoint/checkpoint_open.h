// A checkpoint opened and verified: checkpoint.json read and checked (format, version,
// checksum), the model's shape it records, its units' files checked against their XXH3,
// and a unit's master weights read in part (export reads a checkpoint this way, outside
// training); before a resume, the same checked against the run (OpenCheckpointForRun).
// Part of //checkpoint (see checkpoint.h for the layout). Nothing here changes a file.
// Thread-safety: reentrant; an OpenedCheckpoint is a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/lora_base.h"
#include "checkpoint/moment_blocks.h"
#include "core/options.h"
#include "core/status.h"
#include "models/hf/hf_special_tokens.h"
#include "runtime/model.h"

namespace strata {

// A checkpoint opened outside training (export): checkpoint.json read and checked (format,
// version, checksum); the model's shape (keys a version lacked take their GPT values).
struct OpenedCheckpoint {
  std::string path;  // the step-<k> directory
  int next_step = 0;
  // train.steps of the run that wrote it (its learning-rate schedule); 0 when the
  // checkpoint predates the key.
  int train_steps = 0;
  ModelOptions model;  // resolved: no "0 = default" values
  int version = 0;  // of the format (checkpoint_format.h)
  // The files that hold the arrays: version 6 on, one per rank of the run that wrote it
  // (`world` ranks); versions 1-5, one per unit (`world` 0).
  int world = 0;
  struct File {
    std::string path;  // in the step-<k> directory
    uint64_t bytes = 0;
    std::string hash;  // XXH3 of the whole file, hex
    int rank = -1;     // version 6 on: the rank that wrote it (-1: a unit's file, versions 1-5)
    std::string host;  // version 6 on: that rank's host name
  };
  std::vector<File> files;
  // Where elements of a unit's array lie: used elements [begin, end) at byte `offset` of
  // files[file], `bytes` long: fp32 values, or an 8-bit moment's stored form over them.
  struct Piece {
    int file = 0;
    size_t begin = 0, end = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };
  struct Unit {
    std::string name;
    size_t elements = 0;  // used elements (no world padding)
    // Per array (master, exp_avg, exp_avg_sq): its pieces, in element order, covering
    // [0, elements) without gaps.
    std::vector<Piece> arrays[3];
    // Per array: f32 values, or an 8-bit moment (version 8: exp_avg of dtype
    // q8-dynamic-signed, exp_avg_sq of q8-dynamic-unsigned; tiers/state_blocks.h's stored
    // form) with its blocks of [0, elements) (the manifest's "fp32_blocks").
    MomentBlocks blocks[3];
    bool eight_bit(int array) const { return blocks[array].eight_bit; }
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
  // What the checkpoint keeps of the model's source (model.from=hf:DIR; checkpoint_source.h):
  // "hf:DIR" (absolute), the special-token ids of its config.json, and the copy of its
  // generation_config.json in the directory "source", as (path, XXH3 hex). Empty in a
  // checkpoint of another source, or written before strata kept them.
  std::string source;
  HfSpecialTokens source_tokens;
  std::vector<std::pair<std::string, std::string>> source_files;
};
StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& path);
// Every file's size and XXH3 against checkpoint.json (streamed in 16 MiB pieces); with
// `world` > 1 only files rank, rank + world, ... (this rank's share); `failed` (may be
// null) gets the index of the file that failed. A missing file is kNotFound naming it and,
// for a rank's file, the rank and host that wrote it.
Status VerifyCheckpointFiles(const OpenedCheckpoint& checkpoint, bool show_progress, int rank = 0,
                             int world = 1, int* failed = nullptr);
// The same for the files listed (indices into checkpoint.files).
Status VerifyCheckpointFileList(const OpenedCheckpoint& checkpoint, const std::vector<int>& files,
                                bool show_progress, int* failed = nullptr);
// The files holding any of used elements [begin, end) of unit `unit` (indices, ascending).
std::vector<int> CheckpointFilesFor(const OpenedCheckpoint& checkpoint, int unit, size_t begin,
                                    size_t end);
// Elements [begin, begin + count) of unit `unit`'s array `array` (0 master, 1 exp_avg,
// 2 exp_avg_sq), pread from the files that hold them (whichever rank wrote them), as fp32
// values: an 8-bit moment's blocks are read whole and dequantized.
Status ReadCheckpointArray(const OpenedCheckpoint& checkpoint, int unit, int array, size_t begin,
                           size_t count, float* out);
// An 8-bit moment array's stored form over elements [begin, end) (begin on a block of 2048
// elements, end on one or at the unit's used end), as it is: SectionsOf the runs of
// `blocks` over the range bytes at `out` (tiers/state_blocks.h), pread from the
// files that hold them. FailedPrecondition for an fp32 array.
Status ReadCheckpointMoment8Bit(const OpenedCheckpoint& checkpoint, int unit, int array,
                                size_t begin, size_t end, uint8_t* out);
// Bytes of that stored form.
uint64_t CheckpointMoment8BitBytes(const OpenedCheckpoint& checkpoint, int unit, int array,
                                   size_t begin, size_t end);
// Elements [begin, begin + count) of unit `unit`'s fp32 master weights (pread).
Status ReadCheckpointMaster(const OpenedCheckpoint& checkpoint, int unit, size_t begin,
                            size_t count, float* out);

// The checkpoint at `where` (a step-<k> directory, or a checkpoint directory: its newest
// complete step-<k>) opened and checked against the run, before its files are (the first
// step of LoadCheckpoint): a LoRA checkpoint's rank, alpha, targets and `base` (may be null:
// none), the model's shape key by key, every unit's name and size, the step against
// train.steps. Each mismatch is kInvalidArgument naming the key or unit and what to set.
// What may change on a resume but changes the run is said in the log (`say`, one rank): a
// train.steps other than the checkpoint's run's (the learning-rate schedule changes) and a
// tokenizer other than the one its text went through.
StatusOr<OpenedCheckpoint> OpenCheckpointForRun(const Model& model, const Options& options,
                                                const std::string& where, const LoraBase* base,
                                                bool say = false);

}  // namespace strata
