// Tests loading, writing and splitting: llm.c (GPT-2 and Llama 3) round trips through files
// written here, strata token files through WriteTokenFile at both widths, text files as
// bytes, every bad-file case with the message fragment a user would search for, vocab
// checks naming position and id, and the split boundaries. Files go to TEST_TMPDIR.
#include "data/tokens.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

std::string ReadFile(const std::string& path) {
  std::string bytes;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return bytes;
  char chunk[4096];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file)) > 0) bytes.append(chunk, got);
  std::fclose(file);
  return bytes;
}

// A token file image: a header whose first fields are `fields` (the rest 0), then the
// tokens' bytes.
template <typename Id>
std::string TokenFileBytes(const std::vector<int32_t>& fields, const std::vector<Id>& tokens) {
  std::vector<int32_t> header(kTokenHeaderInts, 0);
  std::copy(fields.begin(), fields.end(), header.begin());
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(Id));
  return bytes;
}

// An llm.c file image: header (magic, version, declared count) then the tokens.
std::string LlmcBytes(const std::vector<uint16_t>& tokens, int32_t declared_tokens,
                      int32_t version = kLlmcVersion, int32_t magic = kLlmcMagic) {
  return TokenFileBytes({magic, version, declared_tokens}, tokens);
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

// Ids spread over [0, modulus), Llama-3-sized moduli included.
std::vector<uint32_t> WideRamp(int count, uint32_t modulus) {
  std::vector<uint32_t> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<uint32_t>((i * 104729ull) % modulus);
  return tokens;
}

std::vector<uint32_t> Widen(const std::vector<uint16_t>& tokens) {
  return std::vector<uint32_t>(tokens.begin(), tokens.end());
}

TEST(LoadTokens, LlmcFileRoundTrips) {
  const std::vector<uint16_t> tokens = Ramp(5000, 50257);
  const std::string path = WriteFile("round_trip.bin", LlmcBytes(tokens));
  auto loaded = LoadTokenFile(path, 50304);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kLlmc);
  EXPECT_EQ(loaded->tokens->bytes_per_token(), 2);
  EXPECT_EQ(loaded->tokens->ToVector(), Widen(tokens));
  EXPECT_EQ(loaded->description, "file " + path + " (llm.c format, 5000 tokens)");
}

TEST(LoadTokens, DetectsLlmcByContentNotExtension) {
  const std::vector<uint16_t> tokens = Ramp(100, 300);
  const std::string path = WriteFile("looks_like_text.txt", LlmcBytes(tokens));
  auto loaded = LoadTokenFile(path, 300);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kLlmc);
  EXPECT_EQ(loaded->tokens->ToVector(), Widen(tokens));
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
  ExpectLoadError(path, 256,
                  {"does not look like text", "not a token file", "no llm.c magic 20240520"});
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
  EXPECT_EQ(loaded->tokens->ToVector(), (std::vector<uint32_t>{'a', 'b'}));
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

// --- llm.c Llama 3 token files (magic 20240801, version 7, 4-byte tokens)

TEST(LoadTokens, LlmcLlama3FileKeepsIdsAbove65535) {
  const std::vector<uint32_t> tokens = WideRamp(3000, 128256);
  const std::string path = WriteFile(
      "llama3.bin", TokenFileBytes({kLlmcLlama3Magic, kLlmcLlama3Version, 3000}, tokens));
  auto loaded = LoadTokenFile(path, 128256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kLlmcLlama3);
  EXPECT_EQ(loaded->tokens->bytes_per_token(), 4);
  EXPECT_EQ(loaded->tokens->ToVector(), tokens);
  EXPECT_EQ(loaded->description, "file " + path + " (llm.c Llama 3 format, 3000 tokens)");
  // An id of the Llama 3 vocabulary is out of range for a GPT-2 one; 4-byte offsets.
  ExpectLoadError(path, 50304, {path, "token id 104729 at token position 1 (byte offset 1028)",
                                "model.vocab = 50304"});
}

TEST(LoadTokensErrors, LlmcLlama3HeaderProblems) {
  const std::vector<uint32_t> tokens = WideRamp(10, 128256);
  ExpectLoadError(WriteFile("llama3_v1.bin", TokenFileBytes({kLlmcLlama3Magic, 1, 10}, tokens)),
                  128256, {"unsupported llm.c Llama 3 version 1", "knows version 7"});
  ExpectLoadError(WriteFile("llama3_short.bin", TokenFileBytes({kLlmcLlama3Magic, 7, 11}, tokens)),
                  128256, {"truncated llm.c Llama 3 file", "header says 11 tokens",
                           "only 10 tokens"});
  // Version 7 and 10 four-byte tokens, but a damaged magic.
  ExpectLoadError(WriteFile("llama3_magic.bin", TokenFileBytes({20240802, 7, 10}, tokens)),
                  128256, {"looks like an llm.c Llama 3 token file", "header[0] is 20240802",
                           "not the llm.c Llama 3 magic 20240801"});
}

// --- strata token files and WriteTokenFile

// header[i] of a token file image.
int32_t HeaderInt(const std::string& bytes, int index) {
  int32_t value = 0;
  std::memcpy(&value, bytes.data() + 4 * index, sizeof(value));
  return value;
}

// The names in TEST_TMPDIR that contain `fragment` (temporary files left behind).
std::vector<std::string> NamesContaining(const std::string& fragment) {
  std::vector<std::string> names;
  DIR* directory = ::opendir(TempPath("").c_str());
  if (directory == nullptr) return names;
  while (const dirent* entry = ::readdir(directory)) {
    if (std::string(entry->d_name).find(fragment) != std::string::npos) {
      names.push_back(entry->d_name);
    }
  }
  ::closedir(directory);
  return names;
}

// A strata file image with the given header fields 1.. (version, count, width, vocab).
template <typename Id>
std::string StrataBytes(const std::vector<Id>& tokens, int32_t version, int32_t declared_tokens,
                        int32_t bytes_per_token, int32_t vocab) {
  return TokenFileBytes({kStrataTokensMagic, version, declared_tokens, bytes_per_token, vocab},
                        tokens);
}

TEST(WriteTokenFile, SixteenBitIdsRoundTripAtTwoBytes) {
  std::vector<uint32_t> tokens = WideRamp(5000, 50257);
  tokens[17] = 65535;  // the largest id that still fits 2 bytes
  const std::string path = TempPath("strata16.bin");
  ASSERT_OK(WriteTokenFile(path, tokens, 65536));
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), 1024u + 2 * 5000);
  EXPECT_EQ(HeaderInt(bytes, 0), 20261201);
  EXPECT_EQ(HeaderInt(bytes, 1), 1);
  EXPECT_EQ(HeaderInt(bytes, 2), 5000);
  EXPECT_EQ(HeaderInt(bytes, 3), 2);
  EXPECT_EQ(HeaderInt(bytes, 4), 65536);
  for (int field = 5; field < kTokenHeaderInts; ++field) ASSERT_EQ(HeaderInt(bytes, field), 0);
  auto loaded = LoadTokenFile(path, 65536);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kStrata);
  EXPECT_EQ(loaded->tokens->bytes_per_token(), 2);  // the file's width, not doubled
  EXPECT_EQ(loaded->tokens->ToVector(), tokens);
  EXPECT_EQ(loaded->description,
            "file " + path + " (strata format, 5000 tokens of 2 bytes, vocabulary 65536)");
  EXPECT_TRUE(NamesContaining("strata16.bin.partial").empty());
}

TEST(WriteTokenFile, IdsAbove65535RoundTripAtFourBytes) {
  std::vector<uint32_t> tokens = WideRamp(4000, 128256);
  tokens[0] = 65536;
  tokens[1] = 128255;
  const std::string path = TempPath("strata32.bin");
  ASSERT_OK(WriteTokenFile(path, tokens, 128256));
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), 1024u + 4 * 4000);
  EXPECT_EQ(HeaderInt(bytes, 3), 4);
  EXPECT_EQ(HeaderInt(bytes, 4), 128256);
  auto loaded = LoadTokenFile(path, 128256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tokens->bytes_per_token(), 4);
  EXPECT_EQ(loaded->tokens->ToVector(), tokens);
  EXPECT_EQ(loaded->description,
            "file " + path + " (strata format, 4000 tokens of 4 bytes, vocabulary 128256)");
  // A model with a larger (say padded) vocabulary reads it too.
  EXPECT_OK(LoadTokenFile(path, 128256 + 64));
}

TEST(WriteTokenFile, UnknownVocabularyIsZeroAndModelVocabDecides) {
  const std::vector<uint32_t> tokens = {5, 300, 70000, 7};
  const std::string path = TempPath("strata_novocab.bin");
  ASSERT_OK(WriteTokenFile(path, tokens, 0));
  EXPECT_EQ(HeaderInt(ReadFile(path), 4), 0);
  auto loaded = LoadTokenFile(path, 70001);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tokens->ToVector(), tokens);
  EXPECT_EQ(loaded->description, "file " + path + " (strata format, 4 tokens of 4 bytes)");
  ExpectLoadError(path, 70000, {path, "token id 70000 at token position 2 (byte offset 1032)",
                                "model.vocab = 70000"});
}

TEST(WriteTokenFile, ReplacesAnExistingFileWhole) {
  const std::string path = WriteFile("strata_replace.bin", "old contents");
  ASSERT_OK(WriteTokenFile(path, std::vector<uint32_t>{1, 2, 3}, 4));
  auto loaded = LoadTokenFile(path, 4);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tokens->ToVector(), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE(NamesContaining("strata_replace.bin.partial").empty());
}

TEST(WriteTokenFile, RefusesWhatNoReaderTakes) {
  const std::string path = TempPath("strata_refused.bin");
  const std::vector<uint32_t> tokens = {1, 2, 3, 99, 4};
  EXPECT_THAT(WriteTokenFile(path, tokens, 99),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("token id 99 at token position 3"),
                             HasSubstr("vocab = 99"))));
  EXPECT_THAT(WriteTokenFile(path, {}, 100),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no tokens to write")));
  EXPECT_THAT(WriteTokenFile(path, tokens, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab must be >= 0")));
  EXPECT_THAT(WriteTokenFile("", tokens, 100),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("path is empty")));
  EXPECT_TRUE(NamesContaining("strata_refused").empty());  // nothing was created
}

TEST(WriteTokenFile, IoErrorsNameTheFileAndLeaveNothing) {
  const std::string path = TempPath("no_such_directory/tokens.bin");
  EXPECT_THAT(WriteTokenFile(path, std::vector<uint32_t>{1}, 0),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no_such_directory/tokens.bin.partial."),
                             HasSubstr(std::strerror(ENOENT)))));
  // A directory or a symbolic link in the way: refused before anything is written (a rename
  // would replace the link, not write through it), nothing left behind.
  const std::string directory = TempPath("strata_is_a_directory");
  ASSERT_EQ(::mkdir(directory.c_str(), 0755), 0);
  EXPECT_THAT(WriteTokenFile(directory, std::vector<uint32_t>{1}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it is a directory")));
  EXPECT_TRUE(NamesContaining("strata_is_a_directory.partial").empty());
  const std::string kept = TempPath("strata_link_target.bin");
  ASSERT_OK(WriteTokenFile(kept, std::vector<uint32_t>{7}, 0));
  const std::string link = TempPath("strata_link.bin");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(kept.c_str(), link.c_str()), 0);
  EXPECT_THAT(WriteTokenFile(link, std::vector<uint32_t>{1, 2}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a symbolic link")));
  struct stat info {};
  ASSERT_EQ(::lstat(link.c_str(), &info), 0);
  EXPECT_TRUE(S_ISLNK(info.st_mode));
  EXPECT_EQ(LoadTokenFile(kept, 256)->tokens->ToVector(), std::vector<uint32_t>{7});
}

TEST(LoadTokens, DetectsStrataByContentNotExtension) {
  const std::string path = TempPath("strata_named.txt");
  ASSERT_OK(WriteTokenFile(path, std::vector<uint32_t>{10, 20, 30}, 256));
  auto loaded = LoadTokenFile(path, 256);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->format, TokenFormat::kStrata);
  EXPECT_EQ(loaded->tokens->ToVector(), (std::vector<uint32_t>{10, 20, 30}));
  // data.format=bytes: whatever the content, its bytes.
  auto bytes = LoadTokenFile(path, 256, DataFormat::kBytes);
  ASSERT_OK(bytes);
  EXPECT_EQ(bytes->format, TokenFormat::kText);
  EXPECT_EQ(bytes->num_tokens(), 1024 + 3 * 2);
}

TEST(LoadTokensErrors, StrataHeaderProblems) {
  const std::vector<uint16_t> narrow = Ramp(10, 256);
  const std::vector<uint32_t> wide = WideRamp(10, 256);
  ExpectLoadError(WriteFile("s_v2.bin", StrataBytes(narrow, 2, 10, 2, 256)), 256,
                  {"s_v2.bin", "unsupported strata token version 2 (header[1])",
                   "knows version 1"});
  ExpectLoadError(WriteFile("s_w3.bin", StrataBytes(narrow, 1, 10, 3, 256)), 256,
                  {"corrupt strata token header", "header[3] says 3 bytes per token",
                   "2- or 4-byte tokens"});
  ExpectLoadError(WriteFile("s_w0.bin", StrataBytes(narrow, 1, 10, 0, 256)), 256,
                  {"header[3] says 0 bytes per token"});
  ExpectLoadError(WriteFile("s_negative.bin", StrataBytes(narrow, 1, -3, 2, 256)), 256,
                  {"corrupt strata token header", "negative token count -3"});
  ExpectLoadError(WriteFile("s_zero.bin", StrataBytes(std::vector<uint16_t>{}, 1, 0, 2, 256)),
                  256, {"strata token file is empty", "declares 0 tokens"});
  ExpectLoadError(WriteFile("s_vocab_negative.bin", StrataBytes(narrow, 1, 10, 2, -7)), 256,
                  {"corrupt strata token header", "negative vocabulary -7 (header[4])"});
  std::string reserved = StrataBytes(narrow, 1, 10, 2, 256);
  reserved[4 * 200] = 9;
  ExpectLoadError(WriteFile("s_reserved.bin", reserved), 256,
                  {"corrupt strata token header", "header[200] is 9", "reserved"});
  const std::string magic_only = StrataBytes(narrow, 1, 10, 2, 256).substr(0, 4);
  ExpectLoadError(WriteFile("s_magic_only.bin", magic_only), 256,
                  {"truncated strata token header", "magic 20261201", "only 4 bytes"});
  // Truncated and oversized payloads, counted at the file's width.
  ExpectLoadError(WriteFile("s_short.bin", StrataBytes(wide, 1, 12, 4, 256)), 256,
                  {"truncated strata token file", "header says 12 tokens (1072 bytes)",
                   "only 10 tokens (1064 bytes)"});
  ExpectLoadError(WriteFile("s_long.bin", StrataBytes(wide, 1, 8, 4, 256)), 256,
                  {"strata token file is longer than its header says",
                   "8 tokens make 1056 bytes", "the file has 1064"});
}

TEST(LoadTokensErrors, StrataVocabularyLargerThanTheModelsNamesTheKey) {
  const std::string path = TempPath("strata_llama_vocab.bin");
  ASSERT_OK(WriteTokenFile(path, std::vector<uint32_t>{1, 2, 3}, 128256));
  EXPECT_THAT(LoadTokenFile(path, 50304),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("vocabulary of 128256 (header[4])"),
                             HasSubstr("larger than model.vocab = 50304"),
                             HasSubstr("set model.vocab to 128256"))));
}

TEST(LoadTokensErrors, StrataIdAtOrAboveItsOwnVocabularyIsCorrupt) {
  // A hand-made file whose header says vocabulary 1000 but holds id 1000 (WriteTokenFile
  // refuses to write it).
  std::vector<uint16_t> tokens = Ramp(50, 1000);
  tokens[9] = 1000;
  const std::string path = WriteFile("s_corrupt_id.bin", StrataBytes(tokens, 1, 50, 2, 1000));
  ExpectLoadError(path, 2000, {path, "token id 1000 at token position 9 (byte offset 1042)",
                               "the vocabulary of 1000 its header[4] says", "corrupt"});
  // The same ids with an unknown vocabulary: model.vocab decides.
  const std::string unknown = WriteFile("s_unknown_id.bin", StrataBytes(tokens, 1, 50, 2, 0));
  EXPECT_OK(LoadTokenFile(unknown, 2000));
  ExpectLoadError(unknown, 1000, {"token id 1000 at token position 9", "model.vocab = 1000"});
}

TEST(LoadTokensErrors, NearMissStrataHeadersAreNamed) {
  // Version 1, 10 tokens of header[3] = 4 bytes, the size matches: a damaged strata magic.
  const std::string path = WriteFile(
      "s_other_magic.bin",
      TokenFileBytes({kStrataTokensMagic + 1, 1, 10, 4, 256}, WideRamp(10, 256)));
  ExpectLoadError(path, 256, {path, "looks like a strata token file",
                              "header[2] = 10 tokens of header[3] = 4 bytes",
                              "header[0] is 20261202", "not the strata token magic 20261201"});
  // With 2-byte tokens it would match llm.c's layout too; header[3] says strata.
  ExpectLoadError(WriteFile("s_other_magic16.bin",
                            TokenFileBytes({12345, 1, 10, 2, 256}, Ramp(10, 256))),
                  256, {"looks like a strata token file", "header[0] is 12345"});
}

TEST(TokenIds, CopiesEitherWidthToInt32) {
  const TokenIds narrow(std::vector<uint16_t>{1, 65535, 3, 4});
  const TokenIds wide(std::vector<uint32_t>{1, 65536, 128255, 4});
  EXPECT_EQ(narrow.size(), 4);
  EXPECT_EQ(wide.size(), 4);
  EXPECT_EQ(narrow.bytes_per_token(), 2);
  EXPECT_EQ(wide.bytes_per_token(), 4);
  EXPECT_EQ(wide[2], 128255u);
  std::vector<int32_t> out(2);
  narrow.CopyToInt32(1, 2, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{65535, 3}));
  wide.CopyToInt32(1, 2, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{65536, 128255}));
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
  // Both splits share the dataset's storage.
  EXPECT_EQ(splits->train.tokens, dataset->tokens);
  EXPECT_EQ(splits->validation.tokens, dataset->tokens);
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
