// The SentencePiece test model (testdata/persuasion_bpe512.model, testdata/README.md says
// how it was trained) through libsentencepiece: golden ids from spm_encode, and what
// round-trips. The model was trained with the identity normalization, no whitespace
// folding and byte fallback, and with it decode(encode(x)) == x holds for the whole
// corpus and for the mixed-script fixture (bytes outside the 512 pieces fall back to
// <0xNN> pieces). A model trained with SentencePiece's defaults (NFKC, runs of spaces
// folded, unknown characters to <unk>) would not round-trip: Decode gives the normalized
// text.
#include "core/testing/status_matchers.h"
#include "data/default_corpus.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/tokenizer_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kModel[] = "data/tokenizer/testdata/persuasion_bpe512.model";

TEST(SentencePieceTokenizerTest, GoldenIdsFromSpmEncode) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_THAT(tokenizer->Describe(), HasSubstr("512 pieces"));
  // printf 'Anne Elliot, said she.' | spm_encode --model=... --output_format=id
  EXPECT_THAT(tokenizer->Encode("Anne Elliot, said she."),
              IsOkAndHolds(ElementsAre(380, 394, 437, 300, 457, 264, 441, 344, 340, 461)));
}

TEST(SentencePieceTokenizerTest, CorpusAndMixedScriptsRoundTrip) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  const std::string mixed = testing_tokenizer::ReadTestFile("data/tokenizer/testdata/mixed.txt");
  for (const std::string_view text : {DefaultCorpus(), std::string_view(mixed)}) {
    ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> ids, tokenizer->Encode(text));
    EXPECT_LT(ids.size(), text.size());
    for (const uint32_t id : ids) ASSERT_LT(id, 512u);
    ASSERT_OK_AND_ASSIGN(const std::string decoded, tokenizer->Decode(ids));
    EXPECT_TRUE(decoded == text) << "decoded " << decoded.size() << " bytes of " << text.size();
  }
}

TEST(SentencePieceTokenizerTest, FingerprintIsOfTheModel) {
  ASSERT_OK_AND_ASSIGN(auto first, OpenSentencePieceTokenizer(kModel));
  ASSERT_OK_AND_ASSIGN(auto second, OpenSentencePieceTokenizer(kModel));
  EXPECT_EQ(first->Fingerprint(), second->Fingerprint());
  EXPECT_THAT(first->Fingerprint(), HasSubstr("sentencepiece-"));
  EXPECT_NE(first->Fingerprint(), OpenBytesTokenizer()->Fingerprint());
}

TEST(SentencePieceTokenizerTest, Errors) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  EXPECT_THAT(tokenizer->Decode({5, 512}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id 512 at position 1")));
  EXPECT_THAT(OpenSentencePieceTokenizer("/nonexistent/x.model"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/x.model' not found")));
  const std::string dir = testing_tokenizer::MakeTempDir("spm_errors");
  testing_tokenizer::WriteTestFile(dir + "/garbage.model", "not a model at all");
  EXPECT_THAT(
      OpenSentencePieceTokenizer(dir + "/garbage.model"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("garbage.model' cannot be loaded")));
}

}  // namespace
}  // namespace strata
