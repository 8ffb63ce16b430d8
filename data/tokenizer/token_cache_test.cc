// The token cache: written once and reused (the tokenizer is not called again and the
// file is not rewritten), keyed by the text and the tokenizer's fingerprint, loadable by
// data/tokens.h with the tokenizer's vocabulary; the default directory.
#include "data/tokenizer/token_cache.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdlib>

#include "core/testing/status_matchers.h"
#include "data/tokenizer/tokenizer_testing.h"
#include "data/tokens.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Bytes, counting Encode calls.
class CountingTokenizer final : public Tokenizer {
 public:
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override {
    ++encodes_;
    return bytes_->Encode(text);
  }
  StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const override {
    return bytes_->Decode(ids);
  }
  int vocab_size() const override { return bytes_->vocab_size(); }
  std::string Describe() const override { return "counting bytes"; }
  std::string Fingerprint() const override { return bytes_->Fingerprint(); }
  int encodes() const { return encodes_; }

 private:
  std::unique_ptr<Tokenizer> bytes_ = OpenBytesTokenizer();
  mutable std::atomic<int> encodes_{0};
};

struct timespec ModifiedTime(const std::string& path) {
  struct stat info;
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mtim;
}

TEST(TokenCacheTest, WritesOnceAndReuses) {
  const std::string dir = testing_tokenizer::MakeTempDir("cache_once") + "/nested/tokens";
  const std::string text = "It is a truth universally acknowledged.";
  CountingTokenizer tokenizer;
  ASSERT_OK_AND_ASSIGN(const std::string path, CachedTokenFile("a.txt", text, tokenizer, dir));
  EXPECT_EQ(tokenizer.encodes(), 1);
  EXPECT_EQ(path, dir + "/" + TokenCacheFileName(text, tokenizer));
  const struct timespec written = ModifiedTime(path);

  ASSERT_OK_AND_ASSIGN(const TokenDataset dataset, LoadTokenFile(path, 256));
  EXPECT_EQ(dataset.format, TokenFormat::kStrata);
  EXPECT_EQ(dataset.tokens->ToVector(), *tokenizer.Encode(text));

  // Another path with the same bytes hits the same entry; nothing is tokenized or written.
  const int before = tokenizer.encodes();
  EXPECT_THAT(CachedTokenFile("elsewhere/b.txt", text, tokenizer, dir), IsOkAndHolds(path));
  EXPECT_EQ(tokenizer.encodes(), before);
  const struct timespec again = ModifiedTime(path);
  EXPECT_EQ(again.tv_sec, written.tv_sec);
  EXPECT_EQ(again.tv_nsec, written.tv_nsec);

  // Other text: another file.
  ASSERT_OK_AND_ASSIGN(const std::string other,
                       CachedTokenFile("a.txt", text + "!", tokenizer, dir));
  EXPECT_NE(other, path);
}

TEST(TokenCacheTest, AnotherTokenizerGetsAnotherFile) {
  const std::string dir = testing_tokenizer::MakeTempDir("cache_tokenizers");
  const std::string text = "Sir Walter Elliot, of Kellynch Hall, in Somersetshire.";
  const auto bytes = OpenBytesTokenizer();
  ASSERT_OK_AND_ASSIGN(auto sentencepiece, OpenSentencePieceTokenizer(
                                               "data/tokenizer/testdata/persuasion_bpe512.model"));
  ASSERT_OK_AND_ASSIGN(const std::string bytes_path, CachedTokenFile("", text, *bytes, dir));
  ASSERT_OK_AND_ASSIGN(const std::string spm_path, CachedTokenFile("", text, *sentencepiece, dir));
  EXPECT_NE(bytes_path, spm_path);
  // The header carries the tokenizer's vocabulary: a smaller model.vocab is refused.
  ASSERT_OK_AND_ASSIGN(const TokenDataset dataset, LoadTokenFile(spm_path, 512));
  EXPECT_EQ(dataset.tokens->ToVector(), *sentencepiece->Encode(text));
  EXPECT_THAT(LoadTokenFile(spm_path, 300), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenCacheTest, ErrorsNameTheSource) {
  const std::string dir = testing_tokenizer::MakeTempDir("cache_errors");
  const auto bytes = OpenBytesTokenizer();
  EXPECT_THAT(CachedTokenFile("empty.txt", "", *bytes, dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'empty.txt'"), HasSubstr("no tokens"))));
  testing_tokenizer::WriteTestFile(dir + "/file", "x");
  EXPECT_THAT(
      CachedTokenFile("", "text", *bytes, dir + "/file"),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("the embedded default corpus"), HasSubstr("not a directory"))));
}

TEST(TokenCacheTest, DefaultDirectory) {
  ASSERT_EQ(setenv("XDG_CACHE_HOME", "/xdg/cache", 1), 0);
  EXPECT_THAT(DefaultTokenCacheDir(), IsOkAndHolds("/xdg/cache/strata/tokens"));
  ASSERT_EQ(setenv("XDG_CACHE_HOME", "relative", 1), 0);  // the spec says to ignore it
  ASSERT_EQ(setenv("HOME", "/home/someone", 1), 0);
  EXPECT_THAT(DefaultTokenCacheDir(), IsOkAndHolds("/home/someone/.cache/strata/tokens"));
  ASSERT_EQ(unsetenv("XDG_CACHE_HOME"), 0);
  ASSERT_EQ(unsetenv("HOME"), 0);
  EXPECT_THAT(DefaultTokenCacheDir(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace strata
