// What a checkpoint keeps of the model's source (model.from=hf:DIR), so that an export says
// what the source said about generation though the source is gone or elsewhere: its
// config.json's special-token ids (bos_token_id, eos_token_id, pad_token_id, a list kept a
// list) in checkpoint.json's "source", and its generation_config.json copied unchanged into
// step-<k>/source/ with its XXH3. A fine-tuned Llama 3 instruct then exports with its
// eos_token_id [128001, 128009] and its sampling defaults, and stops at its end of turn in
// transformers. Part of //checkpoint (see checkpoint.h for the layout; OpenedCheckpoint's
// source fields are read by checkpoint_open).
// Thread-safety: reentrant; the copy is written into a step-<k>.partial directory that only
// its writer uses.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "checkpoint/checkpoint_open.h"
#include "core/status.h"

namespace strata {

// Bytes the copy of `model_from`'s files takes (0 for a source of another kind or none).
uint64_t ModelSourceBytes(const std::string& model_from);

// For model.from=hf:DIR (`model_from`), reads DIR/config.json's special-token ids and copies
// DIR/generation_config.json (where there is one) into `dir`/source/, and returns
// checkpoint.json's "source": {"from": "hf:<DIR made absolute>", the ids present, "files":
// [{"name", "xxh3"}]}. Null for another source (llmc:FILE, a random init). A config.json or
// generation_config.json no longer readable (moved while the run went on), or ids of another
// kind, are said on stderr and left out: the weights are what a checkpoint must keep.
StatusOr<nlohmann::json> CopyModelSource(const std::string& model_from, const std::string& dir);

// The checkpoint's copy of its source's generation_config.json, checked against its XXH3
// (kDataLoss naming the file when it differs); nullopt where the checkpoint has none.
StatusOr<std::optional<std::string>> CheckpointGenerationConfig(const OpenedCheckpoint& checkpoint);

}  // namespace strata
