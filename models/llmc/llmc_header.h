// The header of llm.c's GPT-2 checkpoint format (karpathy/llm.c train_gpt2.c): 256
// little-endian int32 (header[0] = magic 20240326, header[1] = version 3 for fp32,
// [2] = max_seq_len, [3] = vocab, [4] = layers, [5] = heads, [6] = channels, [7] = padded
// vocab), followed by every parameter in fp32 (interop/llmc_model.h reads and writes them).
// Here because a model's shape comes from it: model.from=llmc:FILE sets the model.* keys
// (config/options_parse.h) before any weights are read.
// Thread-safety: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/options.h"
#include "core/status.h"
#include "data/tokens.h"  // kLlmcModelMagic, and the token files' magics

namespace strata {

inline constexpr int kLlmcModelVersionFp32 = 3;
inline constexpr size_t kLlmcHeaderInts = 256;
inline constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

// The GPT that `path`'s header describes (family gpt, vocab and padded vocab as stored).
// Errors name the file and the field: wrong magic (a token file's is named), a version
// other than 3 (version 5 is llm.c's bf16 file), impossible sizes, a file whose size is
// not the header's parameter count.
StatusOr<ModelOptions> ReadLlmcHeader(const std::string& path);

}  // namespace strata
