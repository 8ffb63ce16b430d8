// Token streams for training: loading them (byte-level text, llm.c token files, strata token
// files, or the embedded default corpus), writing strata token files, and splitting a
// stream into a training and a validation part.
//
// Formats, detected by content, never by the file name (data.format=auto). The three token
// file formats share llm.c's layout: a header of 256 little-endian int32, then exactly N
// little-endian unsigned tokens, N = header[2].
//  - llm.c (GPT-2): header[0] = magic 20240520, header[1] = version 1; 2-byte tokens.
//  - llm.c Llama 3: header[0] = magic 20240801, header[1] = version 7; 4-byte tokens.
//  - strata: header[0] = magic 20261201, header[1] = version 1, header[3] = bytes per token
//    (2 or 4), header[4] = the vocabulary the tokens were made for (0 = unknown; else every
//    id is below it, and model.vocab must be at least it), header[5..255] = 0.
//    WriteTokenFile writes it.
//  - anything else is text: every byte is one token id 0..255.
// A file that starts with a known magic is that format and must be a valid file of it (a
// wrong version, width or short header is an error, never a fallback to text). A near
// miss is an error too: a header whose version (and for strata, width) and token count
// match one of the formats and the file's size but whose magic is wrong, or the magic of
// an llm.c model checkpoint. Text must look like text: more than 1% of bytes that are NUL
// or not valid UTF-8 is refused as binary. data.format=bytes skips the detection: every
// byte of any file is a token. Only regular files are read (a FIFO or a device could
// block or never end).
//
// Storage: ids are held at the width their source had (TokenIds): 2 bytes a token for text,
// the corpus, llm.c GPT-2 files and 2-byte strata files, 4 bytes for llm.c Llama 3 and
// 4-byte strata files. A 16-bit stream thus takes no more memory than before, and reading
// widens to int32 only in the few tokens a batch copies. (One width for all, uint32, would
// be simpler by one branch but double the memory of every GPT-2-sized token file.)
//
// Invariants: a loaded TokenDataset is non-empty and every id is < the vocab it was loaded
// for (an int, so every id fits in int32, what the kernels take).
// Splits are contiguous: train = the first tokens, validation = the last
// floor(N * val_fraction) tokens; no window of one split reads a token of the other.
// Every error names the file (or the embedded corpus) and the problem.
//
// Thread-safety: the token storage is immutable and shared (shared_ptr<const>), so datasets
// and splits may be copied and read from any number of threads. WriteTokenFile shares no
// state; two writers of one path leave one of the two files, whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/options.h"
#include "core/status.h"

namespace strata {

// The header every token file format shares: 256 little-endian int32.
inline constexpr int kTokenHeaderInts = 256;
inline constexpr int64_t kTokenHeaderBytes = kTokenHeaderInts * 4;  // 1024

inline constexpr int32_t kLlmcMagic = 20240520;        // llm.c GPT-2 token files
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // llm.c Llama 3 token files
inline constexpr int32_t kLlmcLlama3Version = 7;
inline constexpr int32_t kLlmcModelMagic = 20240326;   // llm.c's model checkpoints

// strata's own token files (see the top of this file and data/README.md).
inline constexpr int32_t kStrataTokensMagic = 20261201;
inline constexpr int32_t kStrataTokensVersion = 1;

enum class TokenFormat {
  kEmbeddedCorpus,  // DefaultCorpus(), byte-level
  kText,            // a file read byte-level
  kLlmc,            // an llm.c GPT-2 token file (2-byte tokens)
  kLlmcLlama3,      // an llm.c Llama 3 token file (4-byte tokens)
  kStrata,          // a strata token file (2- or 4-byte tokens)
};
// "embedded corpus", "text", "llm.c", "llm.c Llama 3", "strata"
const char* TokenFormatName(TokenFormat format);

// Token ids at one width for the whole stream: 2 or 4 bytes a token. Immutable once built.
class TokenIds {
 public:
  TokenIds() = default;
  explicit TokenIds(std::vector<uint16_t> ids) : narrow_(std::move(ids)) {}
  explicit TokenIds(std::vector<uint32_t> ids) : wide_(std::move(ids)), is_wide_(true) {}

  int64_t size() const {
    return static_cast<int64_t>(is_wide_ ? wide_.size() : narrow_.size());
  }
  int bytes_per_token() const { return is_wide_ ? 4 : 2; }
  uint32_t operator[](int64_t position) const {
    return is_wide_ ? wide_[position] : narrow_[position];
  }
  // Copies ids [begin, begin + count) to out as int32 (the ids of a loaded dataset are
  // < vocab, an int). The range is not checked.
  void CopyToInt32(int64_t begin, int64_t count, int32_t* out) const;
  // Every id, widened (tests and tools; a copy of the whole stream).
  std::vector<uint32_t> ToVector() const;

 private:
  std::vector<uint16_t> narrow_;  // used when !is_wide_
  std::vector<uint32_t> wide_;    // used when is_wide_
  bool is_wide_ = false;
};

struct TokenDataset {
  std::shared_ptr<const TokenIds> tokens;  // never null once loaded
  TokenFormat format = TokenFormat::kText;
  // Who the tokens came from, for error messages: "data file '/x/y.bin'" or
  // "the embedded default corpus".
  std::string source;
  // One line for logs: "embedded default corpus (466854 bytes)",
  // "file /x/y.bin (llm.c format, 1000000 tokens)", "file a.txt (text, 512 bytes)",
  // "file /x/z.bin (strata format, 1000000 tokens of 4 bytes, vocabulary 128256)".
  std::string description;

  int64_t num_tokens() const { return tokens ? tokens->size() : 0; }
};

// Loads data.path (empty = the embedded default corpus) and checks every id < vocab.
// Errors: vocab < 1 (kInvalidArgument); missing file (kNotFound, "not found"); unreadable
// (the errno text); empty file; a token file header shorter than 1024 bytes, a negative
// count, a strata width other than 2 or 4, a negative header[4] or a nonzero reserved
// field, fewer or more token bytes than the header says (kDataLoss); an unsupported version,
// a count of 0, a strata header[4] above vocab (naming model.vocab), an id >= vocab or >=
// the strata header's vocabulary (kInvalidArgument naming the token position and the id).
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

// Writes `tokens` to `path` as a strata token file (version 1): 2 bytes a token when every
// id < 65536, else 4; header[4] = vocab (0 = unknown). Atomic: the bytes go to a new file
// beside `path` (`path`.partial.<pid>.<n>, removed on failure and by a registered signal
// handler), which is synced and then renamed over `path`; a reader sees the old file or
// the whole new one, never a part. Errors (kInvalidArgument): an empty path, vocab < 0, no
// tokens, more than 2^31 - 1 tokens, an id >= vocab when vocab > 0 (naming its position
// and id); I/O errors name the file and the errno text.
Status WriteTokenFile(const std::string& path, absl::Span<const uint32_t> tokens, int vocab);

// A contiguous range [begin, end) of a dataset's tokens.
struct TokenSplit {
  std::shared_ptr<const TokenIds> tokens;
  int64_t begin = 0;
  int64_t end = 0;
  std::string name;    // "train" or "validation"
  std::string source;  // the dataset's source, for error messages

  int64_t num_tokens() const { return end - begin; }
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
