// A cache of tokenized text: each (text, tokenizer) pair is tokenized once and kept as a
// strata token file (data/tokens.h's WriteTokenFile: 2 or 4 bytes a token, the tokenizer's
// vocabulary in the header), which later runs load instead of tokenizing again.
//
// A file is named by the XXH3-128 of the text's bytes and the XXH3-64 of the tokenizer's
// Fingerprint(): "<32 hex>-<16 hex>.tokens". The name is the whole key: the same text under
// another path hits, an edited text or another tokenizer misses; nothing is ever
// invalidated (old files stay until the directory is cleaned). Files are written whole or
// not at all (WriteTokenFile renames a finished file into place), so a file that exists is
// complete; two processes filling one entry at once both tokenize, and one file remains.
//
// Thread-safety: no shared state; safe from any thread and any number of processes.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {

// $XDG_CACHE_HOME/strata/tokens when XDG_CACHE_HOME is set to an absolute path, else
// $HOME/.cache/strata/tokens. Error (kFailedPrecondition) when neither is set.
StatusOr<std::string> DefaultTokenCacheDir();

// The path of the token file of `text` under `tokenizer` in `cache_dir` (created with its
// parents when missing). Tokenizes and writes the file only when it is not there yet.
// `text_path` names the text in messages (empty: the embedded default corpus).
// Errors: those of Encode and WriteTokenFile (text that yields no tokens is an error),
// a cache directory that cannot be made, each naming the text and the directory.
StatusOr<std::string> CachedTokenFile(const std::string& text_path, std::string_view text,
                                      const Tokenizer& tokenizer, const std::string& cache_dir);

// The file name CachedTokenFile uses (no directory), for tests and tools.
std::string TokenCacheFileName(std::string_view text, const Tokenizer& tokenizer);

}  // namespace strata
