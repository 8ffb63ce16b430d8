// Checks of the files a run reads and writes, made at start-up so that nothing a user owns
// is lost and no misplaced setting fails after hours of training:
// (Inputs being regular files is checked where they are read: config/options_parse.h,
// data/tokens.h; both before any output is opened.)
// - the inputs the options name (the config file, data.path, model.from, data.tokenizer,
//   train.resume; a directory with the files directly in it) are noted as the run's inputs
//   (core/run_inputs.h), so that no output, now or later (a checkpoint, an export), is
//   written over one; an output (--metrics, --trace) naming an input is refused before
//   anything is opened; an output that is a directory or sits in a missing or read-only
//   directory is refused too. Opening them follows core/streaming_output.h (--metrics) and
//   core/atomic_file.h (--trace);
// - train.checkpoint_dir is created if missing and must be a writable directory with room
//   for one checkpoint (checked before the first step, not at the first checkpoint), and
//   is locked for the run (<dir>/strata-checkpoint.lock, core/lock_file.h: O_EXCL, naming
//   host and pid, so it holds on network filesystems too): two runs on one directory would
//   replace each other's checkpoints.
// Thread-safety: pure functions of the filesystem.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/lock_file.h"
#include "core/options.h"
#include "core/status.h"

namespace strata {

// One output file of `strata train` and the flag that names it ("--metrics").
struct OutputFile {
  std::string flag;
  std::string path;  // "" = not asked for
  // A whole-file output (core/atomic_file.h's rules, checked now), else a streaming one.
  bool whole_file = false;
};

// The path a source option names after its scheme ("hf:DIR" -> DIR, "llmc:FILE",
// "sentencepiece:FILE"), or "" for one without a file ("", "gpt2", "bytes").
std::string SourcePath(const std::string& source);

// Notes the inputs `options` and the config file name (see above).
Status NoteOptionInputs(const std::string& config_path, const Options& options);

// The outputs of `strata train` against its inputs (see above); notes the inputs first.
Status CheckOutputsAreNotInputs(const std::string& config_path,
                                const std::vector<OutputFile>& outputs, const Options& options);

inline constexpr const char* kCheckpointLockName = "strata-checkpoint.lock";

// train.checkpoint_dir (when set): created, writable, locked, `checkpoint_bytes` free. The
// lock lives as long as the returned object (null when no directory is set).
StatusOr<std::unique_ptr<DirLock>> ClaimCheckpointDir(const Options& options,
                                                      uint64_t checkpoint_bytes);

}  // namespace strata
