// Tests loading and splitting: llm.c round trips through a file written here, text files as
// bytes, every bad-file case with the message fragment a user would search for, vocab
// checks naming position and id, and the split boundaries. Files go to TEST_TMPDIR.
#include "data/tokens.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return path;
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  std::fclose(file);
  return path;
}

// An llm.c file image: header (magic, version, declared count) then the tokens.
std::string LlmcBytes(const std::vector<uint16_t>& tokens, int32_t declared_tokens,
                      int32_t version = kLlmcVersion, int32_t magic = kLlmcMagic) {
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = declared_tokens;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

std::string LlmcBytes(const std::vector<uint16_t>& tokens) {
  return LlmcBytes(tokens, static_cast<int32_t>(tokens.size()));
}

// Expects a failed load (any code) whose message contains every fragment.
void ExpectLoadError(const std::string& path, int vocab,
                     const std::vector<std::string>& fragments) {
  std::vector<::testing::Matcher<const std::string&>> substrings;
  for (const std::string& fragment : fragments) substrings.push_back(HasSubstr(fragment));
  EXPECT_THAT(LoadTokenFile(path, vocab),
              StatusIs(::testing::Ne(absl::StatusCode::kOk), ::testing::AllOfArray(substrings)))
      << path;
}

std::vector<uint16_t> Ramp(int count, int modulus) {
  std::vector<uint16_t> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % modulus);
  return tokens;
}

TEST(LoadTokens, LlmcFileRoundTrips) {
  const std::vector<uint16_t> tokens = Ramp(5000, 50257);
  const std::string path = WriteFile("round_trip.bin", LlmcBytes(tokens));
  auto loaded = LoadTokenFile(path, 50304);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kLlmc);
  EXPECT_EQ(*loaded->tokens, tokens);
  EXPECT_EQ(loaded->description, "file " + path + " (llm.c format, 5000 tokens)");
}

TEST(LoadTokens, DetectsLlmcByContentNotExtension) {
  const std::vector<uint16_t> tokens = Ramp(100, 300);
  const std::string path = WriteFile("looks_like_text.txt", LlmcBytes(tokens));
  auto loaded = LoadTokenFile(path, 300);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kLlmc);
  EXPECT_EQ(*loaded->tokens, tokens);
}

TEST(LoadTokens, BytesFormatTakesAnyFileAsItsBytes) {
  std::string text = "Hello, world!\n";
  text.push_back('\0');
  text.push_back(static_cast<char>(0xFF));
  text.push_back(static_cast<char>(0x80));
  const std::string path = WriteFile("hello.bin", text);  // extension is irrelevant
  auto loaded = LoadTokenFile(path, 256, DataFormat::kBytes);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kText);
  ASSERT_EQ(loaded->num_tokens(), static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ((*loaded->tokens)[i], static_cast<unsigned char>(text[i])) << i;
  }
  EXPECT_EQ(loaded->description, "file " + path + " (raw bytes, " +
                                     std::to_string(text.size()) + " bytes as byte-level tokens)");
  // Detected (auto), the same file is binary: 3 of 17 bytes are NUL or invalid UTF-8.
  ExpectLoadError(path, 256, {path, "does not look like text", "3 of 17 bytes",
                              "byte offset 14", "data.format=bytes"});
}

TEST(LoadTokens, TextWithAFewInvalidBytesAndMultibyteCharactersLoads) {
  // 1% of invalid bytes is tolerated (a stray Latin-1 byte in a big file); UTF-8 is text.
  std::string text;
  for (int i = 0; i < 99; ++i) text += "caf\xC3\xA9 ";  // 6 bytes each
  text += std::string(5, static_cast<char>(0xE9));      // 5 stray bytes of 599
  const std::string path = WriteFile("latin.txt", text);
  auto loaded = LoadTokenFile(path, 256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->num_tokens(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(loaded->description,
            "file " + path + " (text, " + std::to_string(text.size()) +
                " bytes as byte-level tokens)");
  // Twice as many stray bytes is over 1%: refused.
  ExpectLoadError(WriteFile("latin2.txt", text + std::string(5, static_cast<char>(0xE9))), 256,
                  {"10 of 604 bytes", "does not look like text"});
}

TEST(LoadTokensErrors, RandomBinaryIsRefusedUnlessBytes) {
  std::string bytes(4096, '\0');
  uint32_t state = 12345;
  for (char& c : bytes) {
    state = state * 1664525u + 1013904223u;
    c = static_cast<char>(state >> 24);
  }
  const std::string path = WriteFile("random.bin", bytes);
  ExpectLoadError(path, 256, {"does not look like text", "not an llm.c token file"});
  EXPECT_OK(LoadTokenFile(path, 256, DataFormat::kBytes));
}

TEST(LoadTokensErrors, OnlyRegularFilesAreRead) {
  const std::string fifo = TempPath("data.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // Refused at once: reading a FIFO with no writer would block forever.
  ExpectLoadError(fifo, 256, {fifo, "a FIFO (named pipe)", "not a regular file"});
  ExpectLoadError(TempPath(""), 256, {"a directory", "not a regular file"});
  ExpectLoadError("/dev/zero", 256, {"a character device"});
}

TEST(LoadTokens, TextLargerThanOneReadChunk) {
  std::string text(3 * (1 << 20) + 17, 'a');
  for (size_t i = 0; i < text.size(); i += 4099) text[i] = static_cast<char>('a' + i % 26);
  const std::string path = WriteFile("big.txt", text);
  auto loaded = LoadTokenFile(path, 256);
  ASSERT_OK(loaded);
  ASSERT_EQ(loaded->num_tokens(), static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); i += 4099) {
    ASSERT_EQ((*loaded->tokens)[i], static_cast<unsigned char>(text[i])) << i;
  }
}

TEST(LoadTokens, ShortFileWithoutMagicIsText) {
  const std::string path = WriteFile("ab.txt", "ab");
  auto loaded = LoadTokenFile(path, 256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kText);
  EXPECT_EQ(*loaded->tokens, (std::vector<uint16_t>{'a', 'b'}));
}

TEST(LoadTokens, EmptyPathMeansEmbeddedCorpus) {
  DataOptions options;
  auto loaded = LoadTokens(options, 256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kEmbeddedCorpus);
  EXPECT_GT(loaded->num_tokens(), 100000);
  EXPECT_EQ(loaded->description,
            "embedded default corpus (" + std::to_string(loaded->num_tokens()) + " bytes)");
}

TEST(LoadTokens, OptionsPathLoadsThatFile) {
  DataOptions options;
  options.path = WriteFile("options.txt", "some text");
  auto loaded = LoadTokens(options, 256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->num_tokens(), 9);
}

TEST(LoadTokensErrors, MissingFileIsNotFound) {
  const std::string path = TempPath("no_such_file.bin");
  EXPECT_THAT(LoadTokenFile(path, 256), StatusIs(absl::StatusCode::kNotFound));
  ExpectLoadError(path, 256, {path, "not found"});
}

TEST(LoadTokensErrors, OpenErrorsNameTheErrno) {
  const std::string file = WriteFile("plain.txt", "text");
  const std::string path = file + "/below";  // a file is not a directory
  ExpectLoadError(path, 256, {path, "cannot open", std::strerror(ENOTDIR)});
}

TEST(LoadTokensErrors, EmptyFile) {
  const std::string path = WriteFile("empty.txt", "");
  ExpectLoadError(path, 256, {path, "is empty (0 bytes)"});
}

TEST(LoadTokensErrors, TruncatedLlmcHeader) {
  const std::string full = LlmcBytes(Ramp(10, 256));
  const std::string path = WriteFile("short_header.bin", full.substr(0, 100));
  ExpectLoadError(path, 256, {path, "truncated llm.c header", "only 100 bytes", "1024"});
  // Even the bare magic is an llm.c file, not text.
  const std::string magic_only = WriteFile("magic_only.bin", full.substr(0, 4));
  ExpectLoadError(magic_only, 256, {"truncated llm.c header", "only 4 bytes"});
}

TEST(LoadTokensErrors, TruncatedLlmcTokens) {
  const std::string path = WriteFile("short_tokens.bin", LlmcBytes(Ramp(10, 256), 20));
  ExpectLoadError(path, 256,
                  {path, "truncated llm.c file", "header says 20 tokens", "only 10 tokens"});
  EXPECT_THAT(LoadTokenFile(path, 256), StatusIs(absl::StatusCode::kDataLoss));
  // An odd trailing byte is not a token either.
  std::string odd = LlmcBytes(Ramp(10, 256), 11);
  odd.push_back('\x01');
  ExpectLoadError(WriteFile("odd_tokens.bin", odd), 256,
                  {"truncated llm.c file", "header says 11 tokens", "only 10 tokens"});
}

TEST(LoadTokensErrors, LlmcLongerThanHeaderSays) {
  const std::string path = WriteFile("long_tokens.bin", LlmcBytes(Ramp(10, 256), 8));
  ExpectLoadError(
      path, 256,
      {path, "longer than its header says", "8 tokens make 1040 bytes", "the file has 1044"});
}

TEST(LoadTokensErrors, WrongLlmcVersion) {
  const std::string path = WriteFile("version2.bin", LlmcBytes(Ramp(10, 256), 10, 2));
  ExpectLoadError(path, 256, {path, "unsupported llm.c version 2"});
}

TEST(LoadTokensErrors, NegativeOrZeroLlmcCount) {
  ExpectLoadError(WriteFile("negative.bin", LlmcBytes({}, -5)), 256, {"negative token count -5"});
  ExpectLoadError(WriteFile("zero.bin", LlmcBytes({}, 0)), 256, {"declares 0 tokens"});
}

TEST(LoadTokensErrors, NearMissLlmcHeadersAreNamed) {
  // Version 1 and a count that matches the size, but a wrong magic: a damaged header.
  const std::string bytes = LlmcBytes(Ramp(10, 256), 10, 1, kLlmcMagic + 1);
  const std::string path = WriteFile("other_magic.bin", bytes);
  ExpectLoadError(path, 256, {path, "looks like an llm.c token file", "header[0] is 20240521",
                              "not the llm.c magic 20240520"});
  // As raw bytes it is whatever it is.
  auto loaded = LoadTokenFile(path, 256, DataFormat::kBytes);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->num_tokens(), static_cast<int64_t>(bytes.size()));
  // llm.c's model checkpoints are not token files.
  ExpectLoadError(WriteFile("model.bin", LlmcBytes(Ramp(10, 256), 10, 3, kLlmcModelMagic)), 256,
                  {"an llm.c model checkpoint (magic 20240326)"});
}

TEST(LoadTokensErrors, LlmcIdOutOfVocabNamesPositionAndId) {
  std::vector<uint16_t> tokens = Ramp(100, 1000);
  tokens[37] = 1000;
  const std::string path = WriteFile("out_of_vocab.bin", LlmcBytes(tokens));
  ExpectLoadError(
      path, 1000,
      {path, "token id 1000", "token position 37", "byte offset 1098", "model.vocab = 1000"});
  EXPECT_THAT(LoadTokenFile(path, 1000), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(LoadTokenFile(path, 1001));
}

TEST(LoadTokensErrors, TextByteOutOfSmallVocab) {
  const std::string path = WriteFile("high_byte.txt", std::string("abc\xC3\xA9", 5));
  ExpectLoadError(path, 128, {path, "token id 195", "byte offset 3", "model.vocab = 128"});
}

TEST(LoadTokensErrors, BadVocabArgument) {
  EXPECT_THAT(LoadTokenFile(WriteFile("vocab0.txt", "abc"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.vocab must be >= 1")));
}

StatusOr<TokenDataset> TextDataset(int num_tokens) {
  return TokensFromBytes(std::string(num_tokens, 'x'), TokenFormat::kText, "data file 't.txt'",
                         "t.txt", 256);
}

TEST(SplitTokens, LastFractionIsValidation) {
  auto dataset = TextDataset(1000);
  ASSERT_OK(dataset);
  auto splits = SplitTokens(*dataset, 0.1, 16);
  ASSERT_OK(splits);
  EXPECT_EQ(splits->train.begin, 0);
  EXPECT_EQ(splits->train.end, 900);
  EXPECT_EQ(splits->validation.begin, 900);
  EXPECT_EQ(splits->validation.end, 1000);
  EXPECT_EQ(splits->train.name, "train");
  EXPECT_EQ(splits->validation.name, "validation");
  EXPECT_EQ(splits->validation.data(), dataset->tokens->data() + 900);
}

TEST(SplitTokens, ValidationIsFlooredAndMayBeZero) {
  auto dataset = TextDataset(1009);
  ASSERT_OK(dataset);
  auto splits = SplitTokens(*dataset, 0.25, 8);  // 252.25 -> 252
  ASSERT_OK(splits);
  EXPECT_EQ(splits->validation.num_tokens(), 252);
  EXPECT_EQ(splits->train.num_tokens(), 757);
  auto no_validation = SplitTokens(*dataset, 0.0, 8);
  ASSERT_OK(no_validation);
  EXPECT_EQ(no_validation->train.num_tokens(), 1009);
  EXPECT_EQ(no_validation->validation.num_tokens(), 0);
}

TEST(SplitTokens, EachSplitNeedsOneSequencePlusOne) {
  auto dataset = TextDataset(100);
  ASSERT_OK(dataset);
  // 10 validation tokens: exactly seq_len 9 + 1 fits, seq_len 10 does not.
  EXPECT_OK(SplitTokens(*dataset, 0.1, 9));
  EXPECT_THAT(SplitTokens(*dataset, 0.1, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("data file 't.txt'"), HasSubstr("validation split"),
                             HasSubstr("holds 10 tokens"), HasSubstr("data.val_fraction"))));
  // 10 train tokens.
  EXPECT_OK(SplitTokens(*dataset, 0.9, 9));
  EXPECT_THAT(SplitTokens(*dataset, 0.9, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train split")));
}

TEST(SplitTokens, TooFewTokensForOneSequence) {
  const std::string path = WriteFile("tiny.txt", "0123456789");
  auto dataset = LoadTokenFile(path, 256);
  ASSERT_OK(dataset);
  EXPECT_OK(SplitTokens(*dataset, 0.0, 9));
  EXPECT_THAT(SplitTokens(*dataset, 0.0, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("too few tokens for one sequence"),
                             HasSubstr("holds 10 tokens"), HasSubstr("needs 11"))));
}

TEST(SplitTokens, RejectsBadArguments) {
  auto dataset = TextDataset(100);
  ASSERT_OK(dataset);
  EXPECT_FALSE(SplitTokens(*dataset, 1.0, 4).ok());
  EXPECT_FALSE(SplitTokens(*dataset, -0.1, 4).ok());
  EXPECT_FALSE(SplitTokens(*dataset, std::nan(""), 4).ok());
  EXPECT_FALSE(SplitTokens(*dataset, 0.1, 0).ok());
  EXPECT_FALSE(SplitTokens(TokenDataset{}, 0.1, 4).ok());
}

}  // namespace
}  // namespace strata
