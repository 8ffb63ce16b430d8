// See training_data.h.
#include "data/tokenizer/training_data.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "data/default_corpus.h"
#include "data/tokenizer/token_cache.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {
namespace {

// Whether `path` starts with the magic of a token file (it then holds tokens already).
bool IsTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), sizeof(magic))) return false;
  return magic == kLlmcMagic || magic == kLlmcLlama3Magic || magic == kStrataTokensMagic;
}

}  // namespace

std::string ResolvedTokenizerSpec(const Options& options) {
  if (!options.data.tokenizer.empty()) return options.data.tokenizer;
  const std::string& from = options.model.from;
  if (absl::StartsWith(from, "hf:")) {
    const std::string dir = from.substr(3);
    if (std::filesystem::exists(dir + "/tokenizer.json") ||
        std::filesystem::exists(dir + "/tokenizer.model") ||
        (std::filesystem::exists(dir + "/vocab.json") &&
         std::filesystem::exists(dir + "/merges.txt"))) {
      return from;
    }
  }
  return "bytes";
}

std::string TrainingTokenizer(const Options& options) {
  const std::string spec = ResolvedTokenizerSpec(options);
  const std::string& path = options.data.path;
  if (spec == "bytes" && !path.empty() && IsTokenFile(path)) return "";
  for (const char* scheme : {"hf:", "sentencepiece:"}) {
    if (absl::StartsWith(spec, scheme)) {
      std::error_code error;
      const std::filesystem::path absolute =
          std::filesystem::absolute(spec.substr(std::strlen(scheme)), error);
      return error ? spec : absl::StrCat(scheme, absolute.lexically_normal().string());
    }
  }
  return spec;
}

StatusOr<TokenDataset> LoadTrainingTokens(const Options& options, std::string* description) {
  const std::string spec = ResolvedTokenizerSpec(options);
  const DataOptions& data = options.data;
  if (spec == "bytes" || (!data.path.empty() && IsTokenFile(data.path))) {
    if (description != nullptr) {
      *description = spec == "bytes" ? "tokenizer: bytes (one token per byte)"
                                     : "tokenizer: none (data.path holds tokens)";
    }
    return LoadTokens(data, options.model.vocab);
  }
  if (data.format == DataFormat::kBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.format=bytes (every byte one token) and data.tokenizer=", spec,
        " contradict each other: leave one out"));
  }
  StatusOr<std::unique_ptr<Tokenizer>> opened = OpenTokenizer(spec);
  if (!opened.ok()) {
    return Status(opened.status().code(),
                  absl::StrCat("data.tokenizer=", spec, ": ", opened.status().message()));
  }
  const Tokenizer& tokenizer = **opened;
  if (tokenizer.vocab_size() > options.model.vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.tokenizer=", spec, " has ", tokenizer.vocab_size(), " ids but model.vocab is ",
        options.model.vocab, ": set model.vocab to at least ", tokenizer.vocab_size()));
  }
  std::string text;
  if (data.path.empty()) {
    text = std::string(DefaultCorpus());
  } else {
    // The byte-level checks (regular file, not binary) first: they name the problem.
    RETURN_IF_ERROR(LoadTokens(data, 256).status());
    RETURN_IF_ERROR(ReadInputFileInto(data.path, "data file (data.path)", kNoInputLimit, &text));
  }
  std::string cache_dir = data.cache_dir;
  if (cache_dir.empty()) {
    ASSIGN_OR_RETURN(cache_dir, DefaultTokenCacheDir());
  }
  ASSIGN_OR_RETURN(const std::string cached,
                   CachedTokenFile(data.path, text, tokenizer, cache_dir));
  if (description != nullptr) {
    *description = absl::StrCat("tokenizer: ", tokenizer.Describe(), "; tokens cached in ",
                                cached);
  }
  ASSIGN_OR_RETURN(TokenDataset dataset, LoadTokenFile(cached, options.model.vocab));
  return dataset;
}

}  // namespace strata
