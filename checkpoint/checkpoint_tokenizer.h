// The copy of the run's tokenizer a checkpoint holds (step-<k>/tokenizer/, its files under
// their Hugging Face names, each with its XXH3 in checkpoint.json), so that a checkpoint
// moved to another machine samples and exports with its own tokenizer: written with the
// checkpoint (CopyTokenizerFiles) and checked before use (CheckpointTokenizer). Part of
// //checkpoint (see checkpoint.h for the layout).
// Thread-safety: reentrant; the copy is written into a step-<k>.partial directory that only
// its writer uses.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_open.h"
#include "core/status.h"

namespace strata {

// Copies the files of the run's tokenizer `spec` (TokenizerFiles) into `dir`/tokenizer under
// their Hugging Face names and returns (name, XXH3 hex) of each, in TokenizerFiles' order,
// for checkpoint.json's "tokenizer_files": the checkpoint then samples and exports with no
// file outside it. None for a spec without files; a file no longer readable (moved while
// the run went on) leaves the checkpoint without a copy, said on stderr: the spec alone is
// recorded, as before strata copied.
StatusOr<std::vector<std::pair<std::string, std::string>>> CopyTokenizerFiles(
    const std::string& spec, const std::string& dir);

// The tokenizer to sample or export a checkpoint with: its own copy ("hf:<step-k>/tokenizer",
// each file checked against its XXH3: kDataLoss naming a file that differs) where it has
// one, else the recorded spec ("" where none was recorded).
StatusOr<std::string> CheckpointTokenizer(const OpenedCheckpoint& checkpoint);

}  // namespace strata
