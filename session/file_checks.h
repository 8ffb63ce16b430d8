// Checks of the files a run reads and writes, made at start-up so that nothing a user owns
// is lost and no misplaced setting fails after hours of training:
// (Inputs being regular files is checked where they are read: config/options_parse.h,
// data/tokens.h; both before any output is opened.)
// - an output (--metrics, --trace) naming an input (the config file, data.path) is refused
//   before anything is opened, so it can never be truncated; an output that is a directory
//   or sits in a missing or read-only directory is refused too (a pipe or /dev/null is
//   fine);
// - train.checkpoint_dir is created if missing and must be a writable directory with room
//   for one checkpoint (checked before the first step, not at the first checkpoint).
// Thread-safety: pure functions of the filesystem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "core/status.h"

namespace strata {

// One output file of `strata train` and the flag that names it ("--metrics").
struct OutputFile {
  std::string flag;
  std::string path;  // "" = not asked for
};

// The outputs of `strata train` against its inputs (see above).
Status CheckOutputsAreNotInputs(const std::string& config_path,
                                const std::vector<OutputFile>& outputs, const Options& options);

// train.checkpoint_dir (when set): created, writable, `checkpoint_bytes` free.
Status CheckCheckpointDir(const Options& options, uint64_t checkpoint_bytes);

}  // namespace strata
