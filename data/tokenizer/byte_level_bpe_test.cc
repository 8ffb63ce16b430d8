// Byte-level BPE through tokenizer.json documents built here: the alphabet, the merge loop
// (ranks, leftmost first, ignore_merges), added tokens, Split pre-tokenizers, and every
// refusal naming its field. GPT-2's real files: gpt2_tokenizer_test.cc.
#include "data/tokenizer/byte_level_bpe.h"

#include <thread>

#include "core/testing/status_matchers.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/tokenizer_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Merges of the tiny vocabulary: ids 256.. in this order.
const std::vector<std::pair<std::string, std::string>> kHelloMerges = {
    {"h", "e"},     // 256 "he"
    {"l", "l"},     // 257 "ll"
    {"he", "ll"},   // 258 "hell"
    {"hell", "o"},  // 259 "hello"
    {" ", "w"},     // 260 " w"
    {"o", "r"},     // 261 "or"
    {" w", "or"},   // 262 " wor"
    {"a", "a"},     // 263 "aa"
};

StatusOr<std::unique_ptr<Tokenizer>> Open(const Json& document, const std::string& name) {
  const std::string dir = testing_tokenizer::MakeTempDir("bpe_" + name);
  const std::string path = dir + "/tokenizer.json";
  testing_tokenizer::WriteTestFile(path, document.dump());
  return OpenHfTokenizerJson(path);
}

TEST(ByteLevelAlphabetTest, MatchesGpt2BytesToUnicode) {
  EXPECT_EQ(ByteToUnicode(' '), "Ġ");
  EXPECT_EQ(ByteToUnicode('\n'), "Ċ");
  EXPECT_EQ(ByteToUnicode('A'), "A");
  EXPECT_EQ(ByteToUnicode(0x00), "Ā");
  EXPECT_EQ(ByteToUnicode(0xAD), "Ń");  // the last of the 68 remapped bytes
  EXPECT_EQ(BytesToUnicode(" hello\n"), "ĠhelloĊ");
  for (int byte = 0; byte < 256; ++byte) {
    const std::string one(1, static_cast<char>(byte));
    EXPECT_THAT(UnicodeToBytes(BytesToUnicode(one)), ::strata::testing::IsOkAndHolds(one)) << byte;
  }
  EXPECT_THAT(UnicodeToBytes("héllo€"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("byte-level alphabet")));
}

TEST(ByteLevelBpeTest, MergesByRankLeftmostFirst) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer,
                       Open(testing_tokenizer::TinyTokenizerJson(kHelloMerges), "rank"));
  EXPECT_EQ(tokenizer->vocab_size(), 256 + 8);
  // "hello" | " world": " w" (rank 4) then "or" (5) then " wor" (6); "l", "d" stay bytes.
  EXPECT_THAT(tokenizer->Encode("hello world"),
              ::strata::testing::IsOkAndHolds(ElementsAre(259, 262, 'l', 'd')));
  // Overlapping pairs of one rank merge leftmost first.
  EXPECT_THAT(tokenizer->Encode("aaa"), ::strata::testing::IsOkAndHolds(ElementsAre(263, 'a')));
  EXPECT_THAT(tokenizer->Encode("aaaa"), ::strata::testing::IsOkAndHolds(ElementsAre(263, 263)));
  EXPECT_THAT(tokenizer->Encode(""), ::strata::testing::IsOkAndHolds(ElementsAre()));
  ASSERT_OK_AND_ASSIGN(const auto ids, tokenizer->Encode("hello world, aaa!"));
  EXPECT_THAT(tokenizer->Decode(ids), ::strata::testing::IsOkAndHolds("hello world, aaa!"));
}

TEST(ByteLevelBpeTest, LongWordsMatchTheQuadraticReference) {
  // A word of 1500 bytes against merging one best pair at a time.
  ASSERT_OK_AND_ASSIGN(auto tokenizer,
                       Open(testing_tokenizer::TinyTokenizerJson(kHelloMerges), "long"));
  std::string word;
  for (int i = 0; i < 300; ++i) word += (i % 3 == 0) ? "aaaha" : "hella";
  ASSERT_OK_AND_ASSIGN(const auto ids, tokenizer->Encode(word));
  // The reference: repeatedly merge the leftmost pair of the lowest rank.
  std::vector<std::string> symbols;
  for (const char c : word) symbols.emplace_back(1, c);
  while (true) {
    int best = -1, best_rank = 1 << 30;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      for (size_t rank = 0; rank < kHelloMerges.size(); ++rank) {
        if (symbols[k] == kHelloMerges[rank].first && symbols[k + 1] == kHelloMerges[rank].second &&
            static_cast<int>(rank) < best_rank) {
          best = static_cast<int>(k);
          best_rank = static_cast<int>(rank);
        }
      }
    }
    if (best < 0) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  ASSERT_EQ(ids.size(), symbols.size());
  ASSERT_OK_AND_ASSIGN(const std::string decoded, tokenizer->Decode(ids));
  EXPECT_EQ(decoded, word);
  for (size_t k = 0; k < ids.size(); ++k) {
    ASSERT_OK_AND_ASSIGN(const std::string piece, tokenizer->Decode({ids[k]}));
    ASSERT_EQ(piece, symbols[k]) << k;
  }
}

TEST(ByteLevelBpeTest, MergesAsPairsEqualMergesAsStrings) {
  Json strings = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
  Json pairs = strings;
  for (auto& merge : pairs["model"]["merges"]) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    merge = Json::array({text.substr(0, space), text.substr(space + 1)});
  }
  ASSERT_OK_AND_ASSIGN(auto from_strings, Open(strings, "strings"));
  ASSERT_OK_AND_ASSIGN(auto from_pairs, Open(pairs, "pairs"));
  EXPECT_EQ(from_strings->Fingerprint(), from_pairs->Fingerprint());
  EXPECT_EQ(*from_strings->Encode("hello world aaaa"), *from_pairs->Encode("hello world aaaa"));
}

TEST(ByteLevelBpeTest, AddedTokensAreMatchedLiterallyLongestFirst) {
  Json document = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
  document["added_tokens"] = Json::array({
      {{"id", 300},
       {"content", "<|end|>"},
       {"special", true},
       {"normalized", false},
       {"lstrip", false},
       {"rstrip", false},
       {"single_word", false}},
      {{"id", 301}, {"content", "<|end|>!"}, {"special", true}, {"normalized", false}},
      {{"id", 302}, {"content", "hello wo"}, {"special", false}, {"normalized", true}},
  });
  ASSERT_OK_AND_ASSIGN(auto tokenizer, Open(document, "added"));
  EXPECT_EQ(tokenizer->vocab_size(), 303);
  EXPECT_THAT(tokenizer->Describe(), HasSubstr("3 added tokens"));
  // Pre-tokenization never crosses an added token: " " before "<|end|>" is its own word.
  EXPECT_THAT(tokenizer->Encode("hello <|end|>hello"),
              ::strata::testing::IsOkAndHolds(ElementsAre(259, ' ', 300, 259)));
  EXPECT_THAT(tokenizer->Encode("<|end|>!<|end|>"),
              ::strata::testing::IsOkAndHolds(ElementsAre(301, 300)));
  // normalized: false tokens are extracted first (Hugging Face's order), then the others.
  EXPECT_THAT(tokenizer->Encode("hello world"),
              ::strata::testing::IsOkAndHolds(ElementsAre(302, 'r', 'l', 'd')));
  EXPECT_THAT(tokenizer->Decode({259, 300, 301}),
              ::strata::testing::IsOkAndHolds("hello<|end|><|end|>!"));
}

TEST(ByteLevelBpeTest, SplitPatternRunsBeforeByteLevel) {
  // 3+4 is the first merge: GPT-2's regex keeps "12345" whole, so 34 forms first; Llama 3's
  // pattern splits digits in threes ("123", "45") before any merge.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"3", "4"}, {"1", "2"}, {"12", "3"}, {"4", "5"}};
  Json gpt2_style = testing_tokenizer::TinyTokenizerJson(merges);
  Json llama3_style = gpt2_style;
  llama3_style["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", Json::array({{{"type", "Split"},
                                      {"pattern", {{"Regex", kLlama3Pattern}}},
                                      {"behavior", "Isolated"},
                                      {"invert", false}},
                                     {{"type", "ByteLevel"},
                                      {"add_prefix_space", false},
                                      {"trim_offsets", true},
                                      {"use_regex", false}}})}};
  llama3_style["model"]["ignore_merges"] = true;
  ASSERT_OK_AND_ASSIGN(auto gpt2, Open(gpt2_style, "gpt2_style"));
  ASSERT_OK_AND_ASSIGN(auto llama3, Open(llama3_style, "llama3_style"));
  EXPECT_THAT(gpt2->Encode("12345"), ::strata::testing::IsOkAndHolds(ElementsAre(257, 256, '5')));
  EXPECT_THAT(llama3->Encode("12345"), ::strata::testing::IsOkAndHolds(ElementsAre(258, 259)));
  EXPECT_NE(gpt2->Fingerprint(), llama3->Fingerprint());
  EXPECT_THAT(llama3->Describe(), HasSubstr("a regex split"));
  const std::string text = "It's 12345 o'clock,\r\n\n  THE'LL  naïve 東京 🙂\t!";
  ASSERT_OK_AND_ASSIGN(const auto ids, llama3->Encode(text));
  EXPECT_THAT(llama3->Decode(ids), ::strata::testing::IsOkAndHolds(text));
}

TEST(ByteLevelBpeTest, IgnoreMergesTakesWholeWordTokens) {
  Json document = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
  document["model"]["vocab"]["xyz"] = 400;  // no merge makes it
  ASSERT_OK_AND_ASSIGN(auto plain, Open(document, "no_ignore"));
  document["model"]["ignore_merges"] = true;
  ASSERT_OK_AND_ASSIGN(auto ignoring, Open(document, "ignore"));
  EXPECT_THAT(plain->Encode("xyz"), ::strata::testing::IsOkAndHolds(ElementsAre('x', 'y', 'z')));
  EXPECT_THAT(ignoring->Encode("xyz"), ::strata::testing::IsOkAndHolds(ElementsAre(400)));
  EXPECT_NE(plain->Fingerprint(), ignoring->Fingerprint());
}

TEST(ByteLevelBpeTest, AddPrefixSpace) {
  Json document = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
  document["pre_tokenizer"]["add_prefix_space"] = true;
  ASSERT_OK_AND_ASSIGN(auto tokenizer, Open(document, "prefix"));
  EXPECT_THAT(tokenizer->Encode("world"),
              ::strata::testing::IsOkAndHolds(ElementsAre(262, 'l', 'd')));
  EXPECT_THAT(tokenizer->Encode(" world"),
              ::strata::testing::IsOkAndHolds(ElementsAre(262, 'l', 'd')));
}

TEST(ByteLevelBpeTest, NfcNormalizerComposesBeforeEncoding) {
  std::vector<std::pair<std::string, std::string>> merges = kHelloMerges;
  merges.push_back({"\xc3", "\xa9"});  // 264 "\u00e9" (precomposed e acute)
  const std::string precomposed = "\u00e9";
  const std::string decomposed = "e\u0301";  // U+0065 U+0301
  const Json plain_document = testing_tokenizer::TinyTokenizerJson(merges);
  Json nfc_document = plain_document;
  nfc_document["normalizer"] = {{"type", "NFC"}};
  Json sequence_document = plain_document;
  sequence_document["normalizer"] = {{"type", "Sequence"},
                                     {"normalizers", Json::array({{{"type", "NFC"}}})}};
  ASSERT_OK_AND_ASSIGN(auto plain, Open(plain_document, "nfc_plain"));
  ASSERT_OK_AND_ASSIGN(auto nfc, Open(nfc_document, "nfc"));
  ASSERT_OK_AND_ASSIGN(auto sequence, Open(sequence_document, "nfc_sequence"));

  // Without the normalizer the two spellings are different bytes, so different ids.
  EXPECT_THAT(plain->Encode(precomposed), ::strata::testing::IsOkAndHolds(ElementsAre(264)));
  EXPECT_THAT(plain->Encode(decomposed),
              ::strata::testing::IsOkAndHolds(ElementsAre('e', 0xCC, 0x81)));
  for (const auto* tokenizer : {nfc.get(), sequence.get()}) {
    EXPECT_THAT(tokenizer->Encode(precomposed), ::strata::testing::IsOkAndHolds(ElementsAre(264)));
    EXPECT_THAT(tokenizer->Encode(decomposed), ::strata::testing::IsOkAndHolds(ElementsAre(264)));
    EXPECT_THAT(tokenizer->Encode("hello " + decomposed),
                ::strata::testing::IsOkAndHolds(ElementsAre(259, ' ', 264)));
    // Decode gives the normalized text: Decode(Encode(x)) == NFC(x).
    ASSERT_OK_AND_ASSIGN(const auto ids, tokenizer->Encode("hello " + decomposed + "!"));
    EXPECT_THAT(tokenizer->Decode(ids),
                ::strata::testing::IsOkAndHolds("hello " + precomposed + "!"));
    EXPECT_THAT(tokenizer->Describe(), HasSubstr("NFC-normalized"));
  }
  // The normalizer is part of the identity; its two spellings are the same normalizer.
  EXPECT_NE(plain->Fingerprint(), nfc->Fingerprint());
  EXPECT_EQ(nfc->Fingerprint(), sequence->Fingerprint());
  EXPECT_THAT(plain->Describe(), ::testing::Not(HasSubstr("NFC")));
}

TEST(ByteLevelBpeTest, NfcNormalizerAndAddedTokens) {
  Json document = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
  document["normalizer"] = {{"type", "NFC"}};
  document["added_tokens"] = Json::array({
      {{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
      {{"id", 301}, {"content", "\u00e9!"}, {"special", false}, {"normalized", true}},
  });
  ASSERT_OK_AND_ASSIGN(auto tokenizer, Open(document, "nfc_added"));
  // normalized: true tokens are matched in the normalized text: "e\u0301!" is "\u00e9!".
  EXPECT_THAT(tokenizer->Encode("he\u0301!"),
              ::strata::testing::IsOkAndHolds(ElementsAre('h', 301)));
  EXPECT_THAT(tokenizer->Encode("h\u00e9!"),
              ::strata::testing::IsOkAndHolds(ElementsAre('h', 301)));
  // normalized: false tokens are matched in the text as given; the stretches around them
  // are normalized each on its own (a combining mark after the token stays uncomposed).
  EXPECT_THAT(tokenizer->Encode("e\u0301!<|end|>\u0301"),
              ::strata::testing::IsOkAndHolds(ElementsAre(301, 300, 0xCC, 0x81)));
}

TEST(ByteLevelBpeTest, RefusesInvalidUtf8AndUnknownIds) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer,
                       Open(testing_tokenizer::TinyTokenizerJson(kHelloMerges), "errors"));
  EXPECT_THAT(tokenizer->Encode(std::string("ok \xC3\x28", 5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("not valid UTF-8"), HasSubstr("offset 3"))));
  EXPECT_THAT(tokenizer->Encode("\xED\xA0\x80"),  // a UTF-16 surrogate
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("offset 0")));
  EXPECT_THAT(tokenizer->Decode({1, 264}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id 264 at position 1")));
}

TEST(ByteLevelBpeTest, ThreadsShareTheWordCache) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer,
                       Open(testing_tokenizer::TinyTokenizerJson(kHelloMerges), "threads"));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "hello world " + std::to_string(i % 97) + " aaaa\n";
  ASSERT_OK_AND_ASSIGN(const auto expected, tokenizer->Encode(text));
  std::vector<std::vector<uint32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { got[t] = tokenizer->Encode(text).value(); });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& ids : got) EXPECT_EQ(ids, expected);
}

struct Refusal {
  const char* name;
  void (*edit)(Json&);
  absl::StatusCode code;
  const char* field;
  const char* value;
};

TEST(ByteLevelBpeTest, RefusalsNameTheFieldAndValue) {
  const Refusal refusals[] = {
      {"wordpiece", [](Json& d) { d["model"]["type"] = "WordPiece"; },
       absl::StatusCode::kUnimplemented, "model.type", "\"WordPiece\""},
      {"unigram", [](Json& d) { d["model"]["type"] = "Unigram"; }, absl::StatusCode::kUnimplemented,
       "model.type", "\"Unigram\""},
      {"nfkc",
       [](Json& d) {
         d["normalizer"] = {{"type", "NFKC"}};
       },
       absl::StatusCode::kUnimplemented, "normalizer.type", "\"NFKC\""},
      {"sequence_lowercase",
       [](Json& d) {
         d["normalizer"] = {{"type", "Sequence"},
                            {"normalizers", Json::array({{{"type", "Lowercase"}}})}};
       },
       absl::StatusCode::kUnimplemented, "normalizer.normalizers[0].type", "\"Lowercase\""},
      {"sequence_two",
       [](Json& d) {
         d["normalizer"] = {
             {"type", "Sequence"},
             {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Lowercase"}}})}};
       },
       absl::StatusCode::kUnimplemented, "normalizer.normalizers", "Lowercase"},
      {"nfc_added_not_nfc",
       [](Json& d) {
         d["normalizer"] = {{"type", "NFC"}};
         d["added_tokens"] = Json::array(
             {{{"id", 300}, {"content", "e\u0301"}, {"special", false}, {"normalized", true}}});
       },
       absl::StatusCode::kUnimplemented, "added_tokens[0].content", "only content already in NFC"},
      {"metaspace",
       [](Json& d) {
         d["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
       },
       absl::StatusCode::kUnimplemented, "pre_tokenizer.type", "\"Metaspace\""},
      {"no_pre_tokenizer", [](Json& d) { d["pre_tokenizer"] = nullptr; },
       absl::StatusCode::kUnimplemented, "pre_tokenizer", "null"},
      {"byte_fallback", [](Json& d) { d["model"]["byte_fallback"] = true; },
       absl::StatusCode::kUnimplemented, "model.byte_fallback", "true"},
      {"dropout", [](Json& d) { d["model"]["dropout"] = 0.1; }, absl::StatusCode::kUnimplemented,
       "model.dropout", "0.1"},
      {"suffix", [](Json& d) { d["model"]["end_of_word_suffix"] = "</w>"; },
       absl::StatusCode::kUnimplemented, "model.end_of_word_suffix", "\"</w>\""},
      {"lstrip",
       [](Json& d) {
         d["added_tokens"] = Json::array({{{"id", 300}, {"content", "<m>"}, {"lstrip", true}}});
       },
       absl::StatusCode::kUnimplemented, "added_tokens[0].lstrip", "true"},
      {"decoder",
       [](Json& d) {
         d["decoder"] = {{"type", "WordPiece"}};
       },
       absl::StatusCode::kUnimplemented, "decoder.type", "\"WordPiece\""},
      {"truncation",
       [](Json& d) {
         d["truncation"] = {{"max_length", 512}};
       },
       absl::StatusCode::kUnimplemented, "truncation", "max_length"},
      {"unknown_key", [](Json& d) { d["model"]["shiny"] = 1; }, absl::StatusCode::kUnimplemented,
       "model.shiny", "not a field strata reads"},
      {"split_behavior",
       [](Json& d) {
         d["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              Json::array({{{"type", "Split"},
                            {"pattern", {{"Regex", "\\s+"}}},
                            {"behavior", "Removed"},
                            {"invert", false}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}}})}};
       },
       absl::StatusCode::kUnimplemented, "pre_tokenizer.pretokenizers[0].behavior", "\"Removed\""},
      {"bad_regex",
       [](Json& d) {
         d["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              Json::array({{{"type", "Split"},
                            {"pattern", {{"Regex", "(unclosed"}}},
                            {"behavior", "Isolated"}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}}})}};
       },
       absl::StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0].pattern.Regex",
       "(unclosed"},
      {"missing_byte", [](Json& d) { d["model"]["vocab"].erase("Ā"); },
       absl::StatusCode::kInvalidArgument, "byte 0x00", "all 256"},
      {"bad_merge", [](Json& d) { d["model"]["merges"].push_back("x yz"); },
       absl::StatusCode::kInvalidArgument, "merge 8", "\"yz\" is not in the vocabulary"},
      {"bad_vocab_token", [](Json& d) { d["model"]["vocab"]["€"] = 500; },
       absl::StatusCode::kInvalidArgument, "model.vocab \"€\"", "not a byte-level token"},
      // Ids read strictly: 2^32 is not byte 0's id 0 (as nlohmann's get<uint32_t>() made
      // it), 3.7 not 3, true not 1.
      {"wrapped_id", [](Json& d) { d["model"]["vocab"]["Ā"] = 4294967296ull; },
       absl::StatusCode::kInvalidArgument, "model.vocab \"Ā\"",
       "has id 4294967296: expected an integer from 0 to 4294967295"},
      {"fraction_id", [](Json& d) { d["model"]["vocab"]["Ā"] = 0.5; },
       absl::StatusCode::kInvalidArgument, "model.vocab \"Ā\"", "has id 0.5: expected an integer"},
      {"added_wrapped_id",
       [](Json& d) {
         d["added_tokens"] = Json::array(
             {{{"id", 4294967560ull}, {"content", "<|end|>"}, {"special", true}}});
       },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].id",
       "is 4294967560: expected an integer from 0 to 4294967295"},
      // A sparse id would make a table of gigabytes (was std::bad_alloc, exit 134).
      {"sparse_id",
       [](Json& d) {
         d["added_tokens"] = Json::array(
             {{{"id", 2147483600u}, {"content", "<|end|>"}, {"special", true}}});
       },
       absl::StatusCode::kInvalidArgument, "id 2147483600", "ids must be dense"},
      {"added_bool_id",
       [](Json& d) {
         d["added_tokens"] =
             Json::array({{{"id", true}, {"content", "<|end|>"}, {"special", true}}});
       },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].id", "is true: expected an integer"},
  };
  for (const Refusal& refusal : refusals) {
    Json document = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
    refusal.edit(document);
    EXPECT_THAT(Open(document, refusal.name),
                StatusIs(refusal.code, AllOf(HasSubstr(refusal.field), HasSubstr(refusal.value),
                                             HasSubstr("tokenizer.json"))))
        << refusal.name;
  }
}

TEST(ByteLevelBpeTest, MalformedFilesNameThePlace) {
  const std::string dir = testing_tokenizer::MakeTempDir("bpe_malformed");
  testing_tokenizer::WriteTestFile(dir + "/broken.json", "{\"model\": ");
  EXPECT_THAT(OpenHfTokenizerJson(dir + "/broken.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("broken.json"), HasSubstr("not valid UTF-8 JSON"),
                             HasSubstr("line 1, column 11"))));
  // A token written twice: refused naming it (nlohmann kept the last id).
  std::string twice = testing_tokenizer::TinyTokenizerJson(kHelloMerges).dump();
  const size_t vocab = twice.find("\"vocab\":{");
  ASSERT_NE(vocab, std::string::npos);
  twice.insert(vocab + 9, "\"he\":7,");
  testing_tokenizer::WriteTestFile(dir + "/twice.json", twice);
  EXPECT_THAT(OpenHfTokenizerJson(dir + "/twice.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("twice.json"),
                             HasSubstr("key 'he' appears twice in the object of 'vocab'"))));
  EXPECT_THAT(OpenHfTokenizerJson(dir + "/absent.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.json' not found")));
  EXPECT_THAT(OpenHfTokenizerJson(dir),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a directory")));
}

// GPT-2's encoder.json read as strictly as tokenizer.json: a wrapped id and a token
// written twice are refused naming the file and the token.
TEST(ByteLevelBpeTest, Gpt2EncoderJsonIdsAreReadStrictly) {
  const std::string dir = testing_tokenizer::MakeTempDir("gpt2_strict");
  const Json document = testing_tokenizer::TinyTokenizerJson(kHelloMerges);
  std::string merges = "#version: 0.2\n";
  for (const Json& merge : document["model"]["merges"]) merges += merge.get<std::string>() + "\n";
  testing_tokenizer::WriteTestFile(dir + "/vocab.bpe", merges);
  Json vocab = document["model"]["vocab"];
  testing_tokenizer::WriteTestFile(dir + "/encoder.json", vocab.dump());
  ASSERT_OK_AND_ASSIGN(auto tokenizer,
                       OpenGpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe"));
  EXPECT_EQ(tokenizer->vocab_size(), 256 + static_cast<int>(kHelloMerges.size()));

  vocab["Ā"] = 4294967296ull;  // 2^32: was read as byte 0's id 0
  testing_tokenizer::WriteTestFile(dir + "/wrapped.json", vocab.dump());
  EXPECT_THAT(OpenGpt2Tokenizer(dir + "/wrapped.json", dir + "/vocab.bpe"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("wrapped.json"),
                             HasSubstr("the id of \"Ā\" is 4294967296: expected an integer "
                                       "from 0 to 4294967295"))));
  std::string twice = document["model"]["vocab"].dump();
  twice.insert(1, "\"he\":7,");
  testing_tokenizer::WriteTestFile(dir + "/twice.json", twice);
  EXPECT_THAT(OpenGpt2Tokenizer(dir + "/twice.json", dir + "/vocab.bpe"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("twice.json"), HasSubstr("key 'he' appears twice"))));
}

}  // namespace
}  // namespace strata
