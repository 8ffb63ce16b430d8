// The byte-level BPE tokenizer both GPT-2's files and Hugging Face's tokenizer.json
// describe, and the byte <-> unicode alphabet those files spell tokens in. The loaders
// (gpt2_files.cc, hf_tokenizer_json.cc) turn their file into a ByteLevelBpeSpec; this
// builds the tokenizer from it. Internal to data/tokenizer (tokenizer.h is the interface).
//
// Encoding, as GPT-2's reference and Hugging Face's `tokenizers` do it:
//  1. added tokens are found literally (the leftmost, and of those the longest), each one
//     id; the text between them is encoded by steps 2-4, each stretch on its own. With the
//     NFC normalizer, tokens with normalized: false are found in the text as given, each
//     stretch between them is NFC-normalized, and tokens with normalized: true are then
//     found in the normalized stretch (Hugging Face's AddedVocabulary order);
//  2. add_prefix_space: a space is put before a stretch that does not start with one;
//  3. the split patterns run in order, each splitting every piece of the one before
//     (pieces are matches and the stretches between them);
//  4. each piece (a "word") is BPE-merged: it starts as one symbol per byte, then the
//     adjacent pair with the lowest merge rank is merged, leftmost first, until no pair
//     has a rank (with ignore_merges, a word that is a whole vocabulary token is that
//     token at once). The loop keeps candidate pairs in a heap: O(n log n) for a word of
//     n bytes, as Hugging Face's; GPT-2's reference merges every occurrence of the best
//     pair per round instead, which gives the same result whenever a merge's parts are
//     older merges (true of every trained vocabulary). Words are cached.
//
// Thread-safety: immutable after construction except the word cache (mutex-guarded).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100 and up, in byte order. Returns the UTF-8 of the character for `byte`.
std::string ByteToUnicode(uint8_t byte);
// The inverse over a whole token: "Ġhello" -> " hello". Error (kInvalidArgument) when a
// character is not in the alphabet or `token` is not valid UTF-8.
StatusOr<std::string> UnicodeToBytes(std::string_view token);
// The whole-token forward mapping: " hello" -> "Ġhello".
std::string BytesToUnicode(std::string_view bytes);

// GPT-2's pre-tokenization regex.
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelBpeSpec {
  struct Token {
    std::string bytes;  // raw bytes (already mapped back from the byte-level alphabet)
    uint32_t id = 0;
  };
  struct Merge {
    std::string left;   // raw bytes
    std::string right;  // raw bytes
  };
  struct AddedToken {
    std::string content;  // matched literally in the text; what Decode gives for the id
    uint32_t id = 0;
    // Hugging Face's flag: tokens with normalized: false are extracted first.
    bool normalized = false;
  };
  struct SplitStep {
    std::string pattern;
    bool literal = false;  // a plain string (tokenizer.json's {"String": ...})
    std::string field;     // where the pattern came from, for errors
  };

  std::string description;    // Describe()
  std::vector<Token> vocab;   // every id at most once; all 256 single bytes present
  std::vector<Merge> merges;  // rank = index; a later duplicate overrides the earlier
  std::vector<AddedToken> added_tokens;
  std::vector<SplitStep> split_steps;
  bool add_prefix_space = false;
  bool ignore_merges = false;
  // tokenizer.json's {"type": "NFC"} normalizer: Unicode NFC (ICU) before pre-tokenization.
  // The contents of added tokens with normalized: true must then be NFC already (loaders
  // check: Hugging Face matches their normalized form, Decode gives them as written).
  bool nfc = false;
  std::string source;  // the file(s), for error messages
};

// Builds the tokenizer. Errors (kInvalidArgument, naming `spec.source`): a byte with no
// single-byte token, an id used twice, a merge whose parts or result are not tokens, an
// empty added token, a split pattern PCRE2 refuses.
StatusOr<std::unique_ptr<Tokenizer>> NewByteLevelBpe(ByteLevelBpeSpec spec);

// Reads a whole file. kNotFound when it does not exist (the message is `missing_hint`
// after the path, e.g. "run tools/install_deps.sh ..."); other errors name the path.
StatusOr<std::string> ReadTokenizerFile(const std::string& path, const std::string& what,
                                        const std::string& missing_hint);

}  // namespace strata
