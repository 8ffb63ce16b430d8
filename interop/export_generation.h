// What `strata export --to hf:DIR` writes for generation, beside the weights: the special-
// token ids in config.json (bos_token_id, eos_token_id, pad_token_id) and
// generation_config.json, so that transformers starts and stops the exported model as its
// source did (a fine-tuned Llama 3 instruct stops at <|eot_id|>: eos_token_id [128001,
// 128009], kept a list). Internal to //interop:export_weights.
//
// Where they come from, first found first:
//  1. the model's source as the checkpoint keeps it (checkpoint_source.h): its config.json's
//     ids, and its generation_config.json carried unchanged (byte for byte);
//  2. a LoRA checkpoint written before strata kept that: its base directory (hf:DIR), read
//     there (the merged export re-reads the base anyway);
//  3. the ids alone from the checkpoint's tokenizer (its copy, else where training found it):
//     tokenizer_config.json's bos/eos/pad tokens, GPT-2's <|endoftext|>;
// and where no generation_config.json is carried, a minimal one with the ids is written (none
// where no ids are known: bytes, a SentencePiece model alone).
// Thread-safety: a plain function of the files.
#pragma once

#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "core/status.h"
#include "models/hf/hf_special_tokens.h"

namespace strata {

struct ExportedGeneration {
  HfSpecialTokens tokens;  // config.json's ids (empty: none known)
  std::string tokens_from;  // "hf:/models/x's config.json", "the tokenizer's special tokens"
  std::optional<std::string> generation_config;  // generation_config.json's bytes
  std::string generation_from;  // "hf:/models/x's, unchanged", "written from the ids"
  // "; ..." for the export's line: what could not be carried, and why (the weights are
  // written either way).
  std::string notes;
  // What the export's line says of it: "; bos_token_id 1, eos_token_id [2, 3] (from ...);
  // generation_config.json (...)", plus the notes.
  std::string Describe() const;
};

ExportedGeneration GenerationOfCheckpoint(const OpenedCheckpoint& checkpoint);

}  // namespace strata
