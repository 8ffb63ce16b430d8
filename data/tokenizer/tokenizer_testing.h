// Test helpers of data/tokenizer: fixture files, the installed GPT-2 files (or a reason to
// skip), tokenizer.json documents built in the test, and the FNV-1a hash the golden id
// streams are recorded with (testdata/gpt2_reference.py computes the same).
// Thread-safety: plain functions; the skip macro is for a test body.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {
namespace testing_tokenizer {

// A file of the source tree (a test's `data`), read whole; fails the test when unreadable.
std::string ReadTestFile(const std::string& path);
// Writes `contents` to `path` (a test's temporary file).
void WriteTestFile(const std::string& path, const std::string& contents);
// A fresh directory under TEST_TMPDIR.
std::string MakeTempDir(const std::string& name);

// The installed GPT-2 files: TokenizerDir()/gpt2/{encoder.json,vocab.bpe}.
std::string Gpt2EncoderJsonPath();
std::string Gpt2VocabBpePath();
// Empty when both files are there, else why a test needs them and how to get them.
std::string Gpt2FilesMissingReason();

// FNV-1a 64 over each id's 4 little-endian bytes.
uint64_t Fnv1a64(const std::vector<uint32_t>& ids);

// A Hugging Face tokenizer.json of GPT-2 built from encoder.json + vocab.bpe: model BPE,
// ByteLevel pre-tokenizer (GPT-2's regex, no prefix space), no added tokens.
nlohmann::json Gpt2TokenizerJson(const std::string& encoder_json_path,
                                 const std::string& vocab_bpe_path);

// A tiny byte-level BPE tokenizer.json: ids 0..255 are the bytes in byte order (in the
// byte-level alphabet), then one id per merge, in order: merge k ("left", "right", raw
// bytes) makes token 256 + k = left + right. Pre-tokenizer: ByteLevel with GPT-2's regex.
nlohmann::json TinyTokenizerJson(const std::vector<std::pair<std::string, std::string>>& merges);

}  // namespace testing_tokenizer
}  // namespace strata

// Skips the test (printing "SKIPPED: ...") when GPT-2's files are not installed.
#define SKIP_WITHOUT_GPT2_FILES()                                                              \
  do {                                                                                         \
    const std::string strata_missing_ = ::strata::testing_tokenizer::Gpt2FilesMissingReason(); \
    if (!strata_missing_.empty()) {                                                            \
      std::printf("SKIPPED: %s\n", strata_missing_.c_str());                                   \
      GTEST_SKIP() << strata_missing_;                                                         \
    }                                                                                          \
  } while (0)
