// llm.c's GPT-2 checkpoint format (karpathy/llm.c train_gpt2.c): a header of 256
// little-endian int32 (header[0] = magic 20240326, header[1] = version 3 for fp32,
// [2] = max_seq_len, [3] = vocab, [4] = layers, [5] = heads, [6] = channels, [7] = padded
// vocab), then every parameter in fp32, tensor by tensor with each per-layer tensor's
// layers back to back: wte [Vp,C], wpe [maxT,C], ln1w, ln1b, qkvw [3C,C], qkvb,
// attprojw [C,C], attprojb, ln2w, ln2b, fcw [4C,C], fcb, fcprojw [C,4C], fcprojb, lnfw,
// lnfb. Matrices are [out, in], as strata's. Import (model.from=llmc:FILE) and export
// (strata export --to llmc:FILE) of GPT models.
// Thread-safety: plain functions.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "core/options.h"
#include "models/llmc/llmc_header.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

// Loads `path`'s weights into every unit of `engine` (running `model`, made from
// `options`), each rank reading only the range it stores.
Status ImportLlmcWeights(const std::string& path, const ModelOptions& options,
                         const Model& model, Engine& engine, bool show_progress);

// Writes `checkpoint` (a GPT) as an llm.c fp32 checkpoint at `path` (temporary name, then
// rename). Returns one line saying what was written.
StatusOr<std::string> ExportLlmc(const OpenedCheckpoint& checkpoint, const std::string& path);

}  // namespace strata
