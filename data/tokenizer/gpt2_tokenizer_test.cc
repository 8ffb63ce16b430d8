// GPT-2's tokenizer from the installed encoder.json + vocab.bpe against ids of the
// reference algorithm (testdata/gpt2_reference.py, OpenAI's encoder.py rewritten, run with
// Debian's python3-regex): single strings, the whole embedded corpus and a mixed-script
// fixture (by count and FNV-1a hash of the id stream), decode(encode(x)) == x, and the
// same ids and fingerprint through a tokenizer.json made from the two files.
// Skips (printing "SKIPPED: ...") where tools/install_deps.sh has not installed the files.
#include <string>
#include <vector>

#include "core/testing/status_matchers.h"
#include "data/default_corpus.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/tokenizer_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::strata::testing::IsOkAndHolds;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct Golden {
  std::string text;
  std::vector<uint32_t> ids;
};

// From testdata/gpt2_reference.py (its GOLDEN list, in order).
const std::vector<Golden>& Goldens() {
  static const auto* goldens = new std::vector<Golden>{
      {"hello world", {31373, 995}},
      {" Hello, world!", {18435, 11, 995, 0}},
      {"Hello world", {15496, 995}},
      {"It's 2024: they'll pay $1,234.56 -- or won't.",
       {1026, 338, 48609, 25, 484, 1183, 1414, 720, 16, 11, 24409, 13, 3980, 1377, 393, 1839, 470,
        13}},
      {"  two  spaces,\ttab\nnewline\n\n  indented",
       {220, 734, 220, 9029, 11, 197, 8658, 198, 3605, 1370, 628, 220, 773, 4714}},
      {"naïve café, Ωmega, 東京, emoji 🙂!",
       {2616, 38776, 40304, 11, 7377, 102, 13731, 11, 10545, 251, 109, 12859, 105, 11, 44805, 32485,
        0}},
      {std::string(76, 'a'), std::vector<uint32_t>(19, 24794)},
      {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
      {"x\u00a0y\u2003z\u3000w \u0085v",
       {87, 1849, 88, 447, 225, 89, 5099, 222, 86, 220, 126, 227, 85}},
      {"", {}},
  };
  return *goldens;
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPT2_FILES();
    StatusOr<std::unique_ptr<Tokenizer>> opened = OpenInstalledGpt2Tokenizer();
    ASSERT_OK(opened);
    tokenizer_ = *std::move(opened);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Gpt2TokenizerTest, GoldenIds) {
  EXPECT_EQ(tokenizer_->vocab_size(), 50257);
  EXPECT_THAT(tokenizer_->Describe(), HasSubstr("50000 merges"));
  for (const Golden& golden : Goldens()) {
    EXPECT_THAT(tokenizer_->Encode(golden.text), IsOkAndHolds(ElementsAreArray(golden.ids)))
        << golden.text;
    EXPECT_THAT(tokenizer_->Decode(golden.ids), IsOkAndHolds(golden.text));
  }
}

TEST_F(Gpt2TokenizerTest, EmbeddedCorpusMatchesTheReferenceAndRoundTrips) {
  const std::string_view corpus = DefaultCorpus();
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> ids, tokenizer_->Encode(corpus));
  // gpt2_reference.py data/default_corpus.txt
  EXPECT_EQ(ids.size(), 115079u);
  EXPECT_EQ(testing_tokenizer::Fnv1a64(ids), 0xf714aabf9d073810ull);
  EXPECT_THAT(tokenizer_->Decode(ids), IsOkAndHolds(std::string(corpus)));
  // A second pass (every word from the cache) gives the same ids.
  EXPECT_THAT(tokenizer_->Encode(corpus), IsOkAndHolds(ElementsAreArray(ids)));
}

TEST_F(Gpt2TokenizerTest, MixedScriptsMatchTheReferenceAndRoundTrip) {
  // Scripts, emoji, combining marks, Unicode spaces (U+00A0, U+2003, U+3000, U+0085,
  // U+2028, U+FEFF, U+180E, U+001C), long runs: where PCRE2's \s, \p{L} and \p{N} under UCP
  // must agree with Python's `regex`.
  const std::string mixed = testing_tokenizer::ReadTestFile("data/tokenizer/testdata/mixed.txt");
  ASSERT_EQ(mixed.size(), 22825u);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> ids, tokenizer_->Encode(mixed));
  // gpt2_reference.py data/tokenizer/testdata/mixed.txt
  EXPECT_EQ(ids.size(), 12626u);
  EXPECT_EQ(testing_tokenizer::Fnv1a64(ids), 0x6fb3f76271cf506dull);
  EXPECT_THAT(tokenizer_->Decode(ids), IsOkAndHolds(mixed));
}

TEST_F(Gpt2TokenizerTest, TokenizerJsonOfTheSameFilesGivesTheSameIds) {
  const std::string dir = testing_tokenizer::MakeTempDir("gpt2_json");
  const nlohmann::json document = testing_tokenizer::Gpt2TokenizerJson(
      testing_tokenizer::Gpt2EncoderJsonPath(), testing_tokenizer::Gpt2VocabBpePath());
  testing_tokenizer::WriteTestFile(dir + "/tokenizer.json", document.dump());
  ASSERT_OK_AND_ASSIGN(auto from_json, OpenHfTokenizerJson(dir + "/tokenizer.json"));
  EXPECT_EQ(from_json->Fingerprint(), tokenizer_->Fingerprint());
  EXPECT_EQ(from_json->vocab_size(), 50257);
  const std::string mixed = testing_tokenizer::ReadTestFile("data/tokenizer/testdata/mixed.txt");
  for (const std::string_view text : {DefaultCorpus(), std::string_view(mixed)}) {
    ASSERT_OK_AND_ASSIGN(const auto expected, tokenizer_->Encode(text));
    EXPECT_THAT(from_json->Encode(text), IsOkAndHolds(ElementsAreArray(expected)));
  }

  // Hugging Face's GPT-2 tokenizer.json also lists <|endoftext|> as an added token: it is
  // then one id wherever it appears, and the fingerprint differs.
  nlohmann::json with_eot = document;
  with_eot["added_tokens"] = nlohmann::json::array({{{"id", 50256},
                                                     {"content", "<|endoftext|>"},
                                                     {"single_word", false},
                                                     {"lstrip", false},
                                                     {"rstrip", false},
                                                     {"normalized", true},
                                                     {"special", true}}});
  testing_tokenizer::WriteTestFile(dir + "/with_eot.json", with_eot.dump());
  ASSERT_OK_AND_ASSIGN(auto hf_gpt2, OpenHfTokenizerJson(dir + "/with_eot.json"));
  EXPECT_NE(hf_gpt2->Fingerprint(), tokenizer_->Fingerprint());
  EXPECT_EQ(hf_gpt2->vocab_size(), 50257);
  EXPECT_THAT(hf_gpt2->Encode("hello world<|endoftext|> Hello, world!"),
              IsOkAndHolds(ElementsAreArray({31373, 995, 50256, 18435, 11, 995, 0})));
  EXPECT_THAT(hf_gpt2->Decode({31373, 50256}), IsOkAndHolds("hello<|endoftext|>"));
}

}  // namespace
}  // namespace strata
