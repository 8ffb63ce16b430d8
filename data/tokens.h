// Token streams for training: loading them (byte-level text, llm.c token files, or the
// embedded default corpus) and splitting them into a training and a validation part.
//
// Formats, detected by content, never by the file name (data.format=auto):
//  - llm.c: a header of 256 little-endian int32 (header[0] = magic 20240520, header[1] =
//    version 1, header[2] = number of tokens N), then exactly N little-endian uint16 tokens.
//  - anything else is text: every byte is one token id 0..255.
// A file that starts with the magic is llm.c and must be a valid one (a wrong version or a
// short header is an error, never a fallback to text). A near miss is an error too: a
// header of version 1 whose count matches the file size but whose magic is wrong, or the
// magic of an llm.c model checkpoint. Text must look like text: more than 1% of bytes
// that are NUL or not valid UTF-8 is refused as binary. data.format=bytes skips the
// detection: every byte of any file is a token. Only regular files are read (a FIFO or a
// device could block or never end).
//
// Invariants: a loaded TokenDataset is non-empty and every id is < the vocab it was loaded
// for; ids fit in uint16 in both formats, which halves the memory of large token files.
// Splits are contiguous: train = the first tokens, validation = the last
// floor(N * val_fraction) tokens; no window of one split reads a token of the other.
// Every error names the file (or the embedded corpus) and the problem.
//
// Thread-safety: the token storage is immutable and shared (shared_ptr<const>), so datasets
// and splits may be copied and read from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/options.h"
#include "core/status.h"

namespace strata {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcModelMagic = 20240326;  // llm.c's model checkpoints
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;  // 1024

enum class TokenFormat {
  kEmbeddedCorpus,  // DefaultCorpus(), byte-level
  kText,            // a file read byte-level
  kLlmc,            // an llm.c token file
};
const char* TokenFormatName(TokenFormat format);  // "embedded corpus", "text", "llm.c"

struct TokenDataset {
  std::shared_ptr<const std::vector<uint16_t>> tokens;  // never null once loaded
  TokenFormat format = TokenFormat::kText;
  // Who the tokens came from, for error messages: "data file '/x/y.bin'" or
  // "the embedded default corpus".
  std::string source;
  // One line for logs: "embedded default corpus (466854 bytes)",
  // "file /x/y.bin (llm.c format, 1000000 tokens)", "file a.txt (text, 512 bytes)".
  std::string description;

  int64_t num_tokens() const { return tokens ? static_cast<int64_t>(tokens->size()) : 0; }
};

// Loads data.path (empty = the embedded default corpus) and checks every id < vocab.
// Errors: vocab < 1 (kInvalidArgument); missing file (kNotFound, "not found"); unreadable
// (the errno text); empty file; llm.c header shorter than 1024 bytes, wrong version,
// negative count, fewer or more token bytes than the header says (kDataLoss); an id >= vocab
// (kInvalidArgument naming the token position and the id).
StatusOr<TokenDataset> LoadTokens(const DataOptions& options, int vocab);

// The same for one file path (never the embedded corpus).
StatusOr<TokenDataset> LoadTokenFile(const std::string& path, int vocab,
                                     DataFormat format = DataFormat::kAuto);

// The embedded default corpus as byte-level tokens, checked against vocab.
StatusOr<TokenDataset> LoadDefaultCorpus(int vocab);

// Byte-level tokens of arbitrary bytes (any content, no format detection), checked against
// vocab; `source` names them in errors and `description` is logged. Used for the corpus and
// handy for tests.
StatusOr<TokenDataset> TokensFromBytes(std::string_view bytes, TokenFormat format,
                                       std::string source, std::string description, int vocab);

// A contiguous range [begin, end) of a dataset's tokens.
struct TokenSplit {
  std::shared_ptr<const std::vector<uint16_t>> tokens;
  int64_t begin = 0;
  int64_t end = 0;
  std::string name;    // "train" or "validation"
  std::string source;  // the dataset's source, for error messages

  int64_t num_tokens() const { return end - begin; }
  const uint16_t* data() const { return tokens->data() + begin; }
};

struct TokenSplits {
  TokenSplit train;
  TokenSplit validation;  // empty (0 tokens) exactly when val_fraction == 0
};

// Splits off the last floor(N * val_fraction) tokens as validation. Every non-empty split
// must hold at least one window of seq_len + 1 tokens (a sequence and its shifted target).
// Errors (kInvalidArgument, naming the source and the config keys to change):
// seq_len < 1; val_fraction outside [0, 1) or NaN; fewer than seq_len + 1 tokens in all;
// a split with fewer than seq_len + 1 tokens.
StatusOr<TokenSplits> SplitTokens(const TokenDataset& dataset, double val_fraction, int seq_len);

}  // namespace strata
