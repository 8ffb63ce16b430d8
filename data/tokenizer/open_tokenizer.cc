// OpenTokenizer: a tokenizer by its spec; see tokenizer.h.
#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {
namespace {

constexpr char kSpecForms[] =
    "bytes, gpt2, sentencepiece:FILE.model, hf:FILE.json or hf:DIR (holding tokenizer.json, "
    "tokenizer.model, or GPT-2's vocab.json + merges.txt)";

bool IsDirectory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool Exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// A SentencePiece tokenizer that says why it was chosen over the directory's tokenizer.json.
class ExplainedTokenizer final : public Tokenizer {
 public:
  ExplainedTokenizer(std::unique_ptr<Tokenizer> inner, std::string why)
      : inner_(std::move(inner)), why_(std::move(why)) {}
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override {
    return inner_->Encode(text);
  }
  StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const override {
    return inner_->Decode(ids);
  }
  int vocab_size() const override { return inner_->vocab_size(); }
  std::string Describe() const override { return absl::StrCat(inner_->Describe(), "; ", why_); }
  std::string Fingerprint() const override { return inner_->Fingerprint(); }

 private:
  std::unique_ptr<Tokenizer> inner_;
  std::string why_;
};

StatusOr<std::unique_ptr<Tokenizer>> OpenHfPath(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer 'hf:' names no path; expected ", kSpecForms));
  }
  if (!IsDirectory(path)) return OpenHfTokenizerJson(path);
  const std::string json_path = path + "/tokenizer.json";
  const std::string model_path = path + "/tokenizer.model";
  const bool has_json = Exists(json_path);
  const bool has_model = Exists(model_path);
  if (!has_json && !has_model) {
    // GPT-2's own files under the names Hugging Face gives them.
    const std::string vocab = path + "/vocab.json", merges = path + "/merges.txt";
    if (Exists(vocab) && Exists(merges)) return OpenGpt2Tokenizer(vocab, merges);
    return absl::NotFoundError(absl::StrCat("tokenizer 'hf:", path, "': the directory has no ",
                                            "tokenizer.json, no tokenizer.model and no ",
                                            "vocab.json + merges.txt"));
  }
  if (!has_json) return OpenSentencePieceTokenizer(model_path);
  StatusOr<std::unique_ptr<Tokenizer>> from_json = OpenHfTokenizerJson(json_path);
  if (from_json.ok() || !has_model ||
      from_json.status().code() != absl::StatusCode::kUnimplemented) {
    return from_json;
  }
  // Llama 2 and its kin: a tokenizer.json strata does not read beside the SentencePiece
  // model it was converted from, which gives the same ids.
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> sentencepiece,
                   OpenSentencePieceTokenizer(model_path));
  return std::unique_ptr<Tokenizer>(std::make_unique<ExplainedTokenizer>(
      std::move(sentencepiece),
      absl::StrCat("tokenizer.json not used: ", from_json.status().message())));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> OpenTokenizer(const std::string& spec) {
  if (spec == "bytes") return OpenBytesTokenizer();
  if (spec == "gpt2") return OpenInstalledGpt2Tokenizer();
  if (absl::StartsWith(spec, "sentencepiece:")) {
    const std::string path = spec.substr(sizeof("sentencepiece:") - 1);
    if (path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer 'sentencepiece:' names no file; expected ", kSpecForms));
    }
    return OpenSentencePieceTokenizer(path);
  }
  if (absl::StartsWith(spec, "hf:")) return OpenHfPath(spec.substr(sizeof("hf:") - 1));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tokenizer '", spec, "'; expected ", kSpecForms));
}

std::vector<std::pair<std::string, std::string>> TokenizerFiles(const std::string& spec) {
  std::vector<std::pair<std::string, std::string>> files;
  if (absl::StartsWith(spec, "hf:")) {
    const std::string path = spec.substr(sizeof("hf:") - 1);
    if (!IsDirectory(path)) return {{path, "tokenizer.json"}};
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                             "special_tokens_map.json", "vocab.json", "merges.txt"}) {
      if (Exists(path + "/" + name)) files.emplace_back(path + "/" + name, name);
    }
  } else if (absl::StartsWith(spec, "sentencepiece:")) {
    files.emplace_back(spec.substr(sizeof("sentencepiece:") - 1), "tokenizer.model");
  } else if (spec == "gpt2") {  // as Hugging Face names GPT-2's files
    const std::string dir = TokenizerDir() + "/gpt2";
    files.emplace_back(dir + "/encoder.json", "vocab.json");
    files.emplace_back(dir + "/vocab.bpe", "merges.txt");
  }
  return files;
}

}  // namespace strata
