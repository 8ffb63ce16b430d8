// The embedded default corpus: the text strata trains on when data.path is empty, compiled
// into the binary so that a fresh machine trains without a download or a data file. It is
// Jane Austen's "Persuasion" (1818, public domain), about 467 KB of plain ASCII English;
// data/README.md states its source. Byte-level tokens of it (ids 0..255) are enough for a
// small GPT to visibly learn English spelling within a minute.
// Thread-safety: the bytes are immutable static data, readable from any thread.
#pragma once

#include <string_view>

namespace strata {

// The corpus bytes, valid for the life of the program (static storage). Never empty.
std::string_view DefaultCorpus();

}  // namespace strata
