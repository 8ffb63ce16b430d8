// A checkpoint gathered into one directory (`strata checkpoint consolidate`, as DeepSpeed's
// zero_to_fp32 gathers ZeRO shards): the rank files of a format-6 checkpoint written on
// several nodes (each node's directory holding its own ranks' files) become one file, as a
// run of one rank writes it, with the manifest, the tokenizer's and the source's copies.
// Older formats (1-5) are rewritten in format 6 the same way. Part of //checkpoint (see
// checkpoint.h for the layout). Nothing of the sources changes.
// Thread-safety: reentrant; one consolidation per output directory.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

struct ConsolidateRequest {
  // The checkpoint (a step-<k> directory, or a checkpoint directory: its newest complete
  // step-<k>) first; then directories where rank files missing beside its manifest are
  // looked for (another node's copy of the same step-<k>, or the checkpoint directory
  // holding it).
  std::vector<std::string> from;
  // The directory written: must not exist or be empty (nothing is written over).
  std::string to;
  bool show_progress = false;
};

// Every source file checked (size and XXH3) before anything is written; the arrays are
// copied in pieces of at most 4M elements (no whole unit in memory); the manifest is
// written last (temp file, synced, renamed). Returns the directory written. A rank file
// found nowhere is kNotFound naming it, the rank and host that wrote it and the
// directories searched.
StatusOr<std::string> ConsolidateCheckpoint(const ConsolidateRequest& request);

}  // namespace strata
