// `strata tokenize --tokenizer SPEC --in TEXT --out FILE`: tokenizes a text file (or, with
// an empty --in, the embedded default corpus) with a real tokenizer and writes a strata
// token file (data/tokens.h: 2 bytes a token when every id < 65536, else 4; the header
// carries the tokenizer's vocabulary, so training refuses a model.vocab that is too small).
// SPEC is one of OpenTokenizer's (data/tokenizer/tokenizer.h): bytes, gpt2,
// sentencepiece:FILE.model, hf:FILE.json or hf:DIR.
// The text is read whole and tokenized in memory (about 1 + 4/(bytes per token) times its
// size). The output is written atomically; it may not be the input file.
// Thread-safety: one call at a time per output file.
#pragma once

#include <string>

#include "core/status.h"

namespace strata {

// Prints one summary line on success. Errors: an empty --out, --out naming the input,
// an unreadable or non-regular input, an unknown or missing tokenizer, text the tokenizer
// refuses (byte-level BPE: invalid UTF-8, with its offset), and WriteTokenFile's errors.
Status TokenizeTextFile(const std::string& input, const std::string& output,
                   const std::string& tokenizer_spec);

}  // namespace strata
