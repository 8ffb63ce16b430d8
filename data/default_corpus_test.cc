// Tests the embedded default corpus: present, a few hundred KB, English ASCII text, and
// loadable as byte-level tokens that split and sample at the default settings.
#include "data/default_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "core/testing/status_matchers.h"
#include "data/batch_sampler.h"
#include "data/tokens.h"

namespace strata {
namespace {

TEST(DefaultCorpus, IsAFewHundredKilobytesOfAsciiEnglish) {
  const std::string_view corpus = DefaultCorpus();
  EXPECT_GT(corpus.size(), 200u * 1000u);
  EXPECT_LE(corpus.size(), 1u << 20);
  size_t ascii = 0;
  size_t letters_and_spaces = 0;
  for (char c : corpus) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x80) ++ascii;
    if ((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || byte == ' ') {
      ++letters_and_spaces;
    }
  }
  EXPECT_GE(ascii, corpus.size() * 99 / 100);
  EXPECT_GE(letters_and_spaces, corpus.size() * 3 / 4);
  EXPECT_THAT(corpus, ::testing::HasSubstr(" the "));
  EXPECT_EQ(corpus.substr(0, 10), "Persuasion");
}

TEST(DefaultCorpus, IsExactlyTheCheckedInText) {
  std::ifstream file("data/default_corpus.txt", std::ios::binary);
  ASSERT_TRUE(file.good()) << "runfile data/default_corpus.txt is missing";
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(DefaultCorpus() == text);  // not EXPECT_EQ: a mismatch would print 467 KB
}

TEST(DefaultCorpus, LoadsSplitsAndSamplesAtDefaults) {
  auto dataset = LoadDefaultCorpus(256);
  ASSERT_OK(dataset);
  EXPECT_EQ(dataset->num_tokens(), static_cast<int64_t>(DefaultCorpus().size()));
  DataOptions data;
  auto splits = SplitTokens(*dataset, data.val_fraction, 64);
  ASSERT_OK(splits);
  auto sampler = BatchSampler::ForTraining(*splits, 4, 64, 1337);
  ASSERT_OK(sampler);
  auto batch = sampler->Sample(0, 0);
  ASSERT_OK(batch);
  for (int32_t id : batch->inputs) ASSERT_LT(id, 256);
  // A byte-level vocab smaller than the corpus's bytes is refused, naming the corpus.
  EXPECT_THAT(LoadDefaultCorpus(100),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("the embedded default corpus")));
}

}  // namespace
}  // namespace strata
