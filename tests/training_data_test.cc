// Which tokenizer a run uses (data/tokenizer/training_data.h): an explicit data.tokenizer wins; by
// default an imported Hugging Face directory's own tokenizer file, else bytes; and the
// tokens that come out: bytes as before, a token file as it is.
#include "data/tokenizer/training_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/testing/status_matchers.h"
#include "data/tokens.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

TEST(TrainingData, TokenizerSpecResolution) {
  Options options;
  EXPECT_EQ(ResolvedTokenizerSpec(options), "bytes");
  const std::string dir = TestDir("training-data-hf");
  options.model.from = "hf:" + dir;
  EXPECT_EQ(ResolvedTokenizerSpec(options), "bytes");  // no tokenizer file there
  std::ofstream(dir + "/tokenizer.json") << "{}";
  EXPECT_EQ(ResolvedTokenizerSpec(options), "hf:" + dir);
  std::filesystem::remove(dir + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer.model") << "x";
  EXPECT_EQ(ResolvedTokenizerSpec(options), "hf:" + dir);
  options.data.tokenizer = "gpt2";  // explicit wins
  EXPECT_EQ(ResolvedTokenizerSpec(options), "gpt2");
  options.model.from = "llmc:/x.bin";
  options.data.tokenizer = "";
  EXPECT_EQ(ResolvedTokenizerSpec(options), "bytes");
}

// What a checkpoint records: the spec, paths made absolute; nothing for a token file
// without a tokenizer (its ids are of an unknown one), the spec where one is named.
TEST(TrainingData, TrainingTokenizerForCheckpoints) {
  Options options;
  EXPECT_EQ(TrainingTokenizer(options), "bytes");  // the embedded corpus, as bytes
  options.data.tokenizer = "gpt2";
  EXPECT_EQ(TrainingTokenizer(options), "gpt2");
  const std::string dir = TestDir("training-tokenizer");
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(dir);
  options.data.tokenizer = "sentencepiece:sub/../pieces.model";
  EXPECT_EQ(TrainingTokenizer(options), "sentencepiece:" + dir + "/pieces.model");
  options.data.tokenizer = "hf:tok";
  EXPECT_EQ(TrainingTokenizer(options), "hf:" + dir + "/tok");
  std::filesystem::current_path(cwd);
  const std::string tokens = dir + "/ids.tokens";
  ASSERT_OK(WriteTokenFile(tokens, {1, 2, 3}, 256));
  options.data = DataOptions{};
  options.data.path = tokens;
  EXPECT_EQ(TrainingTokenizer(options), "");  // a token file: its tokenizer is not known
  options.data.tokenizer = "gpt2";
  EXPECT_EQ(TrainingTokenizer(options), "gpt2");  // named by the user
}

TEST(TrainingData, TokenFilesAreUsedAsTheyAre) {
  const std::string path = TestDir("training-data") + "/ids.tokens";
  const std::vector<uint32_t> ids = {5, 70000, 3, 128000, 9, 1, 2, 3};
  ASSERT_OK(WriteTokenFile(path, ids, 128256));
  Options options;
  options.model.vocab = 128256;
  options.data.path = path;
  options.data.tokenizer = "sentencepiece:/does/not/exist.model";  // never opened
  std::string description;
  ASSERT_OK_AND_ASSIGN(const TokenDataset dataset, LoadTrainingTokens(options, &description));
  EXPECT_EQ(dataset.num_tokens(), 8);
  EXPECT_NE(description.find("data.path holds tokens"), std::string::npos) << description;
}

TEST(TrainingData, BytesByDefault) {
  Options options;
  options.model.vocab = 256;
  std::string description;
  ASSERT_OK_AND_ASSIGN(const TokenDataset dataset, LoadTrainingTokens(options, &description));
  EXPECT_GT(dataset.num_tokens(), 400000);  // the embedded corpus, one token per byte
  EXPECT_NE(description.find("bytes"), std::string::npos) << description;
}

}  // namespace
}  // namespace strata
