// The training tokens of a run: data.path (or the embedded corpus) through data.tokenizer.
//  - data.tokenizer "" means the imported model's own tokenizer (model.from=hf:DIR with a
//    tokenizer.json or tokenizer.model in DIR), else bytes.
//  - bytes: every byte one token (data/tokens.h, as without a tokenizer).
//  - any other tokenizer: a token file (llm.c's or strata's, by its magic) is used as it is;
//    text (a file, or the embedded corpus) is tokenized once and cached as a strata token
//    file in data.cache_dir (default: the user's cache folder; data/tokenizer/token_cache.h),
//    which later runs load directly.
// Errors name the key: a tokenizer with more ids than model.vocab, data.format=bytes with a
// tokenizer, a missing tokenizer file (saying how to get it).
// Thread-safety: plain functions; ranks may call them at once (the cache is safe for that).
#pragma once

#include <string>

#include "core/options.h"
#include "core/status.h"
#include "data/tokens.h"

namespace strata {

// The tokenizer spec a run uses (data.tokenizer resolved as above): "bytes", "gpt2",
// "sentencepiece:FILE", "hf:PATH".
std::string ResolvedTokenizerSpec(const Options& options);

// The tokenizer the run's tokens are in, for its checkpoints to remember (sample and export
// use it): ResolvedTokenizerSpec with a file or directory made absolute, or "" where it is
// not known (a token file, and no tokenizer of the model's own or data.tokenizer).
std::string TrainingTokenizer(const Options& options);

// The tokens of the run; `description` (may be null) gets one line for the log saying
// which tokenizer and which cache file were used.
StatusOr<TokenDataset> LoadTrainingTokens(const Options& options, std::string* description);

}  // namespace strata
