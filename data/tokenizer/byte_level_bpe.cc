// The byte-level BPE tokenizer; see byte_level_bpe.h.
#include "data/tokenizer/byte_level_bpe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "absl/strings/str_format.h"
#include "core/file_kind.h"
#include "data/tokenizer/pcre2_regex.h"
#include "data/tokenizer/unicode_nfc.h"

namespace strata {
namespace {

// The word cache is cleared when it reaches this many words (about 100 bytes each): a
// corpus's words repeat, so a bounded cache keeps nearly all of its hits.
constexpr size_t kWordCacheEntries = size_t{1} << 17;
constexpr uint32_t kRemoved = std::numeric_limits<uint32_t>::max();
// The largest code point of the byte-level alphabet: 256 + 67.
constexpr int kAlphabetCodePoints = 256 + 68;

struct Alphabet {
  std::array<uint16_t, 256> code_point{};              // byte -> code point
  std::array<int16_t, kAlphabetCodePoints> byte_of{};  // code point -> byte, or -1
  std::array<std::string, 256> utf8;                   // byte -> its character's UTF-8
};

std::string CodePointUtf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else {  // the alphabet stays below U+0800
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

const Alphabet& GetAlphabet() {
  static const Alphabet* alphabet = [] {
    auto* table = new Alphabet;
    table->byte_of.fill(-1);
    auto printable = [](int byte) {
      return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
             (byte >= 0xAE && byte <= 0xFF);
    };
    int next = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const int code_point = printable(byte) ? byte : next++;
      table->code_point[byte] = static_cast<uint16_t>(code_point);
      table->byte_of[code_point] = static_cast<int16_t>(byte);
      table->utf8[byte] = CodePointUtf8(code_point);
    }
    return table;
  }();
  return *alphabet;
}

std::string Printable(std::string_view bytes) {
  return "\"" + BytesToUnicode(bytes.substr(0, 80)) + (bytes.size() > 80 ? "...\"" : "\"");
}

// The ids of a pair, as one key.
inline uint64_t PairKey(uint32_t left, uint32_t right) { return (uint64_t{left} << 32) | right; }

struct MergeRule {
  uint32_t rank;
  uint32_t merged;
};

struct AddedTokenGroup {
  std::vector<ByteLevelBpeSpec::AddedToken> tokens;  // longest first
  std::array<bool, 256> first_byte{};
  bool normalized = false;  // the tokens' normalized flag (matched in NFC text under nfc)

  // The longest token at text[position...], or null.
  const ByteLevelBpeSpec::AddedToken* LongestAt(std::string_view text, size_t position) const {
    if (!first_byte[static_cast<unsigned char>(text[position])]) return nullptr;
    const std::string_view rest = text.substr(position);
    for (const auto& token : tokens) {
      if (rest.size() >= token.content.size() &&
          rest.compare(0, token.content.size(), token.content) == 0) {
        return &token;
      }
    }
    return nullptr;
  }
};

class ByteLevelBpe final : public Tokenizer {
 public:
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override;
  StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const override;
  int vocab_size() const override { return vocab_size_; }
  std::string Describe() const override { return description_; }
  std::string Fingerprint() const override { return fingerprint_; }

 private:
  friend StatusOr<std::unique_ptr<Tokenizer>> strata::NewByteLevelBpe(ByteLevelBpeSpec spec);
  struct CachedWord {
    std::string word;
    std::vector<uint32_t> ids;
  };

  // `normalized`: `text` is already NFC-normalized (only meaningful under nfc_).
  Status EncodeWithAddedTokens(std::string_view text, size_t group, bool normalized,
                               std::vector<uint32_t>* ids) const;
  Status EncodeStretch(std::string_view stretch, std::vector<uint32_t>* ids) const;
  Status EncodeSplit(std::string_view piece, size_t step, std::vector<uint32_t>* ids) const;
  void EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const;
  void MergeWord(std::string_view word, std::vector<uint32_t>* ids) const;

  std::vector<std::string> id_bytes_;  // by id: what Decode gives
  std::vector<bool> id_known_;         // by id: a vocabulary or added token
  std::array<uint32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, MergeRule> merges_;
  std::unordered_map<std::string, uint32_t> token_ids_;  // bytes -> id, for ignore_merges
  std::vector<AddedTokenGroup> added_groups_;  // matched in order (HF: normalized: false first)
  std::vector<Pcre2Regex> splits_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  int vocab_size_ = 0;
  std::string description_;
  std::string fingerprint_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<uint64_t, CachedWord> cache_;  // by XXH3 of the word
};

StatusOr<std::vector<uint32_t>> ByteLevelBpe::Encode(std::string_view text) const {
  const int64_t invalid = FindInvalidUtf8(text);
  if (invalid >= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "text is not valid UTF-8 at byte offset %d (byte 0x%02x): byte-level BPE tokenizers "
        "take UTF-8 text",
        invalid, static_cast<unsigned char>(text[invalid])));
  }
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  RETURN_IF_ERROR(EncodeWithAddedTokens(text, 0, false, &ids));
  return ids;
}

Status ByteLevelBpe::EncodeWithAddedTokens(std::string_view text, size_t group, bool normalized,
                                           std::vector<uint32_t>* ids) const {
  if (text.empty()) return absl::OkStatus();
  if (nfc_ && !normalized && (group == added_groups_.size() || added_groups_[group].normalized)) {
    // Past the normalized: false tokens: the stretch is normalized as a whole, then the
    // normalized: true tokens are found in it.
    ASSIGN_OR_RETURN(const std::string nfc_text, ToNfc(text));
    return EncodeWithAddedTokens(nfc_text, group, true, ids);
  }
  if (group == added_groups_.size()) return EncodeStretch(text, ids);
  const AddedTokenGroup& tokens = added_groups_[group];
  size_t stretch = 0;
  size_t position = 0;
  while (position < text.size()) {
    const ByteLevelBpeSpec::AddedToken* token = tokens.LongestAt(text, position);
    if (token == nullptr) {
      ++position;
      continue;
    }
    RETURN_IF_ERROR(EncodeWithAddedTokens(text.substr(stretch, position - stretch), group + 1,
                                          normalized, ids));
    ids->push_back(token->id);
    position += token->content.size();
    stretch = position;
  }
  return EncodeWithAddedTokens(text.substr(stretch), group + 1, normalized, ids);
}

Status ByteLevelBpe::EncodeStretch(std::string_view stretch, std::vector<uint32_t>* ids) const {
  if (stretch.empty()) return absl::OkStatus();
  if (add_prefix_space_ && stretch.front() != ' ') {
    std::string spaced = " ";
    spaced.append(stretch);
    return EncodeSplit(spaced, 0, ids);
  }
  return EncodeSplit(stretch, 0, ids);
}

Status ByteLevelBpe::EncodeSplit(std::string_view piece, size_t step,
                                 std::vector<uint32_t>* ids) const {
  if (step == splits_.size()) {
    EncodeWord(piece, ids);
    return absl::OkStatus();
  }
  if (step + 1 == splits_.size()) {  // the common case: no recursion per piece
    return splits_[step].Split(piece, [&](std::string_view word) { EncodeWord(word, ids); });
  }
  Status inner;
  RETURN_IF_ERROR(splits_[step].Split(piece, [&](std::string_view sub_piece) {
    if (inner.ok()) inner = EncodeSplit(sub_piece, step + 1, ids);
  }));
  return inner;
}

void ByteLevelBpe::EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  if (word.size() == 1) {
    ids->push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    const auto found = token_ids_.find(std::string(word));
    if (found != token_ids_.end()) {
      ids->push_back(found->second);
      return;
    }
  }
  const uint64_t hash = XXH3_64bits(word.data(), word.size());
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto found = cache_.find(hash);
    if (found != cache_.end() && found->second.word == word) {
      ids->insert(ids->end(), found->second.ids.begin(), found->second.ids.end());
      return;
    }
  }
  const size_t first = ids->size();
  MergeWord(word, ids);
  CachedWord entry{std::string(word), std::vector<uint32_t>(ids->begin() + first, ids->end())};
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kWordCacheEntries) cache_.clear();
  cache_.try_emplace(hash, std::move(entry));  // a colliding hash keeps the older word
}

void ByteLevelBpe::MergeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  struct Symbol {
    uint32_t id;   // kRemoved once merged into the symbol on its left
    int32_t prev;  // -1: none
    int32_t next;  // -1: none
  };
  struct Candidate {
    uint32_t rank;
    int32_t left;  // the position of the pair's left symbol
    uint32_t left_id;
    uint32_t right_id;
    uint32_t merged;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  const int32_t size = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(size);
  for (int32_t k = 0; k < size; ++k) {
    symbols[k] = {byte_ids_[static_cast<unsigned char>(word[k])], k - 1, k + 1 < size ? k + 1 : -1};
  }
  std::vector<Candidate> storage;
  storage.reserve(size);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
      std::greater<Candidate>(), std::move(storage));
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const auto rule = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (rule == merges_.end()) return;
    heap.push({rule->second.rank, left, symbols[left].id, symbols[right].id, rule->second.merged});
  };
  for (int32_t k = 0; k + 1 < size; ++k) push_pair(k);
  while (!heap.empty()) {
    const Candidate best = heap.top();
    heap.pop();
    Symbol& left = symbols[best.left];
    // A candidate goes stale when either symbol has merged since it was pushed.
    if (left.id != best.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != best.right_id) continue;
    left.id = best.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = best.left;
    right.id = kRemoved;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(best.left);
  }
  for (int32_t k = 0; k >= 0; k = symbols[k].next) ids->push_back(symbols[k].id);
}

StatusOr<std::string> ByteLevelBpe::Decode(absl::Span<const uint32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (size_t position = 0; position < ids.size(); ++position) {
    const uint32_t id = ids[position];
    if (id >= id_known_.size() || !id_known_[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " at position ", position, " is no token of ", description_));
    }
    text += id_bytes_[id];
  }
  return text;
}

// XXH3-128 of a canonical serialization of what Encode computes.
class FingerprintBuilder {
 public:
  FingerprintBuilder() : state_(XXH3_createState()) { XXH3_128bits_reset(state_); }
  ~FingerprintBuilder() { XXH3_freeState(state_); }
  void Add(std::string_view bytes) {
    AddNumber(bytes.size());
    XXH3_128bits_update(state_, bytes.data(), bytes.size());
  }
  void AddNumber(uint64_t number) { XXH3_128bits_update(state_, &number, sizeof(number)); }
  std::string Hex() const {
    const XXH128_hash_t hash = XXH3_128bits_digest(state_);
    return absl::StrFormat("%016x%016x", hash.high64, hash.low64);
  }

 private:
  XXH3_state_t* state_;
};

}  // namespace

std::string ByteToUnicode(uint8_t byte) { return GetAlphabet().utf8[byte]; }

std::string BytesToUnicode(std::string_view bytes) {
  const Alphabet& alphabet = GetAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char byte : bytes) out += alphabet.utf8[static_cast<unsigned char>(byte)];
  return out;
}

StatusOr<std::string> UnicodeToBytes(std::string_view token) {
  const Alphabet& alphabet = GetAlphabet();
  std::string out;
  out.reserve(token.size());
  const auto* bytes = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    uint32_t code_point = kAlphabetCodePoints;  // out of the alphabet unless decoded below
    size_t length = 1;
    if (bytes[i] < 0x80) {
      code_point = bytes[i];
    } else if ((bytes[i] & 0xE0) == 0xC0 && i + 1 < token.size() && (bytes[i + 1] & 0xC0) == 0x80) {
      code_point = ((bytes[i] & 0x1Fu) << 6) | (bytes[i + 1] & 0x3Fu);
      length = 2;
    }
    if (code_point >= kAlphabetCodePoints || alphabet.byte_of[code_point] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "character at byte %d of \"%s\" is not in the byte-level alphabet (GPT-2's "
          "bytes_to_unicode)",
          i, std::string(token.substr(0, 80))));
    }
    out.push_back(static_cast<char>(alphabet.byte_of[code_point]));
    i += length;
  }
  return out;
}

StatusOr<std::string> ReadTokenizerFile(const std::string& path, const std::string& what,
                                        const std::string& missing_hint) {
  StatusOr<std::string> contents = ReadInputFile(path, what, kTokenizerInputLimit);
  if (!contents.ok() && absl::IsNotFound(contents.status())) {
    return absl::NotFoundError(absl::StrCat(what, " '", path, "' not found", missing_hint));
  }
  return contents;
}

StatusOr<std::unique_ptr<Tokenizer>> NewByteLevelBpe(ByteLevelBpeSpec spec) {
  auto fail = [&](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(spec.source, ": ", message));
  };
  auto tokenizer = std::make_unique<ByteLevelBpe>();
  // Ids: every vocabulary and added token id at most once per kind.
  uint64_t max_id = 0;
  for (const auto& token : spec.vocab) max_id = std::max<uint64_t>(max_id, token.id);
  for (const auto& token : spec.added_tokens) max_id = std::max<uint64_t>(max_id, token.id);
  if (spec.vocab.empty()) return fail("the vocabulary is empty");
  if (max_id >= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return fail(absl::StrCat("id ", max_id, " is too large (ids must be below 2^31 - 1)"));
  }
  // The id table is as long as the largest id: a sparse id (2^31 - 2 among a few hundred
  // tokens) would allocate gigabytes. Real vocabularies are dense (added tokens follow the
  // model's, with small gaps), so ids stay below twice the tokens plus 65,536.
  const uint64_t entries = spec.vocab.size() + spec.added_tokens.size();
  if (max_id >= 2 * entries + 65536) {
    return fail(absl::StrCat("id ", max_id, " is far beyond its ", entries,
                             " tokens (ids must be dense: below 2 x tokens + 65536)"));
  }
  tokenizer->vocab_size_ = static_cast<int>(max_id + 1);
  tokenizer->id_bytes_.resize(max_id + 1);
  tokenizer->id_known_.assign(max_id + 1, false);
  std::unordered_map<std::string, uint32_t> token_ids;
  token_ids.reserve(spec.vocab.size() * 2);
  for (const auto& token : spec.vocab) {
    if (tokenizer->id_known_[token.id]) {
      return fail(absl::StrCat("id ", token.id, " is given to two tokens (",
                               Printable(tokenizer->id_bytes_[token.id]), " and ",
                               Printable(token.bytes), ")"));
    }
    if (token.bytes.empty()) return fail(absl::StrCat("token ", token.id, " is empty"));
    tokenizer->id_known_[token.id] = true;
    tokenizer->id_bytes_[token.id] = token.bytes;
    token_ids.emplace(token.bytes, token.id);
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto found = token_ids.find(std::string(1, static_cast<char>(byte)));
    if (found == token_ids.end()) {
      return fail(absl::StrFormat(
          "byte 0x%02x (\"%s\") has no token: a byte-level BPE vocabulary needs all 256", byte,
          ByteToUnicode(static_cast<uint8_t>(byte))));
    }
    tokenizer->byte_ids_[byte] = found->second;
  }
  // Merges by rank; a later duplicate of a pair overrides the earlier one, as in both
  // references (each builds its rank table as a dict/map from the list).
  tokenizer->merges_.reserve(spec.merges.size() * 2);
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& merge = spec.merges[rank];
    const auto left = token_ids.find(merge.left);
    const auto right = token_ids.find(merge.right);
    const auto merged = token_ids.find(merge.left + merge.right);
    if (left == token_ids.end() || right == token_ids.end() || merged == token_ids.end()) {
      const std::string& missing = left == token_ids.end()    ? merge.left
                                   : right == token_ids.end() ? merge.right
                                                              : merge.left + merge.right;
      return fail(absl::StrCat("merge ", rank, " (", Printable(merge.left), " + ",
                               Printable(merge.right), "): ", Printable(missing),
                               " is not in the vocabulary"));
    }
    tokenizer->merges_[PairKey(left->second, right->second)] =
        MergeRule{static_cast<uint32_t>(rank), merged->second};
  }
  // Added tokens: Hugging Face extracts those with normalized: false first, then the
  // others; without a normalizer that order is the only difference between them.
  std::vector<bool> added_id(max_id + 1, false);
  std::unordered_map<std::string, uint32_t> added_content;
  for (const auto& token : spec.added_tokens) {
    if (token.content.empty()) return fail(absl::StrCat("added token ", token.id, " is empty"));
    if (added_id[token.id]) {
      return fail(absl::StrCat("added token id ", token.id, " is given twice"));
    }
    if (!added_content.emplace(token.content, token.id).second) {
      return fail(absl::StrCat("added token ", Printable(token.content), " is given twice"));
    }
    added_id[token.id] = true;
    tokenizer->id_known_[token.id] = true;
    tokenizer->id_bytes_[token.id] = token.content;
  }
  for (int normalized = 0; normalized < 2; ++normalized) {
    AddedTokenGroup group;
    group.normalized = normalized == 1;
    for (const auto& token : spec.added_tokens) {
      if (token.normalized != (normalized == 1)) continue;
      group.tokens.push_back(token);
      group.first_byte[static_cast<unsigned char>(token.content[0])] = true;
    }
    if (group.tokens.empty()) continue;
    std::stable_sort(group.tokens.begin(), group.tokens.end(), [](const auto& a, const auto& b) {
      return a.content.size() > b.content.size();
    });
    tokenizer->added_groups_.push_back(std::move(group));
  }
  for (const auto& step : spec.split_steps) {
    ASSIGN_OR_RETURN(Pcre2Regex regex,
                     Pcre2Regex::Compile(step.pattern, step.literal,
                                         absl::StrCat(spec.source, ": ", step.field)));
    tokenizer->splits_.push_back(std::move(regex));
  }
  tokenizer->add_prefix_space_ = spec.add_prefix_space;
  tokenizer->ignore_merges_ = spec.ignore_merges;
  tokenizer->nfc_ = spec.nfc;
  if (spec.ignore_merges) tokenizer->token_ids_ = std::move(token_ids);

  FingerprintBuilder fingerprint;
  fingerprint.Add("strata byte-level BPE, version 1");
  for (uint32_t id = 0; id <= max_id; ++id) {
    // Vocabulary tokens by id (added tokens below: an id may be both).
    const bool in_vocab = tokenizer->id_known_[id] && !added_id[id];
    fingerprint.AddNumber(in_vocab ? 1 : 0);
    if (in_vocab) fingerprint.Add(tokenizer->id_bytes_[id]);
  }
  for (const auto& token : spec.vocab) {
    if (added_id[token.id]) {  // vocabulary entries shadowed by an added token of their id
      fingerprint.AddNumber(token.id);
      fingerprint.Add(token.bytes);
    }
  }
  fingerprint.AddNumber(spec.merges.size());
  for (const auto& merge : spec.merges) {
    fingerprint.Add(merge.left);
    fingerprint.Add(merge.right);
  }
  std::vector<ByteLevelBpeSpec::AddedToken> sorted_added = spec.added_tokens;
  std::sort(sorted_added.begin(), sorted_added.end(), [](const auto& a, const auto& b) {
    return std::tie(a.normalized, a.content) < std::tie(b.normalized, b.content);
  });
  fingerprint.AddNumber(sorted_added.size());
  for (const auto& token : sorted_added) {
    fingerprint.AddNumber(token.id);
    fingerprint.AddNumber(token.normalized ? 1 : 0);
    fingerprint.Add(token.content);
  }
  fingerprint.AddNumber(spec.split_steps.size());
  for (const auto& step : spec.split_steps) {
    fingerprint.AddNumber(step.literal ? 1 : 0);
    fingerprint.Add(step.pattern);
  }
  fingerprint.AddNumber(spec.add_prefix_space ? 1 : 0);
  fingerprint.AddNumber(spec.ignore_merges ? 1 : 0);
  // Only when present, so that fingerprints (and token caches) without one are unchanged.
  if (spec.nfc) fingerprint.Add("normalizer NFC");
  tokenizer->fingerprint_ = "bpe-" + fingerprint.Hex();

  tokenizer->description_ = absl::StrCat(spec.description, " (", tokenizer->vocab_size_, " ids, ",
                                         spec.merges.size(), " merges");
  if (!spec.added_tokens.empty()) {
    absl::StrAppend(&tokenizer->description_, ", ", spec.added_tokens.size(), " added tokens");
  }
  tokenizer->description_ += ")";
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace strata
