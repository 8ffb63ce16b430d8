// See export_generation.h.
#include "interop/export_generation.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/files.h"
#include "data/tokenizer/tokenizer.h"
#include "models/hf/hf_json.h"

namespace strata {

std::string ExportedGeneration::Describe() const {
  std::string line;
  if (!tokens.empty()) absl::StrAppend(&line, "; ", tokens.Describe(), " (", tokens_from, ")");
  if (generation_config) absl::StrAppend(&line, "; generation_config.json (", generation_from, ")");
  return line + notes;
}

ExportedGeneration GenerationOfCheckpoint(const OpenedCheckpoint& checkpoint) {
  ExportedGeneration out;
  if (!checkpoint.source.empty()) {
    out.tokens = checkpoint.source_tokens;
    out.tokens_from = absl::StrCat("from ", checkpoint.source, "'s config.json");
    StatusOr<std::optional<std::string>> copy = CheckpointGenerationConfig(checkpoint);
    if (!copy.ok()) {
      absl::StrAppend(&out.notes, "; ", copy.status().message(),
                      ": generation_config.json not carried");
    } else if (*copy) {
      out.generation_config = std::move(**copy);
      out.generation_from = absl::StrCat(checkpoint.source, "'s, unchanged");
    }
  } else if (checkpoint.lora.enabled() && absl::StartsWith(checkpoint.base.from, "hf:")) {
    // A LoRA checkpoint of a strata that did not keep its source: the base directory, which
    // the merged export reads (and checks by its hash) anyway.
    const std::string& from = checkpoint.base.from;
    const std::string dir = from.substr(3);
    StatusOr<HfSpecialTokens> tokens = ReadHfSpecialTokens(dir);
    if (tokens.ok()) {
      out.tokens = *std::move(tokens);
      out.tokens_from = absl::StrCat("from ", from, "'s config.json");
    } else {
      absl::StrAppend(&out.notes, "; the base's special-token ids: ", tokens.status().message());
    }
    const std::string path = dir + "/generation_config.json";
    std::error_code error;
    if (std::filesystem::exists(path, error)) {
      StatusOr<std::string> bytes = ReadInputFile(path, "generation config", kJsonInputLimit);
      if (bytes.ok()) {
        out.generation_config = *std::move(bytes);
        out.generation_from = absl::StrCat(from, "'s, unchanged");
      } else {
        absl::StrAppend(&out.notes, "; ", bytes.status().message(),
                        ": generation_config.json not carried");
      }
    }
  }
  if (out.tokens.empty()) {
    StatusOr<std::string> spec = CheckpointTokenizer(checkpoint);
    if (spec.ok() && !spec->empty()) {
      StatusOr<HfSpecialTokens> tokens = TokenizerSpecialTokens(TokenizerFiles(*spec));
      if (tokens.ok() && !tokens->empty()) {
        out.tokens = *std::move(tokens);
        out.tokens_from = "from the tokenizer's special tokens";
      } else if (!tokens.ok()) {
        absl::StrAppend(&out.notes, "; the tokenizer's special tokens: ",
                        tokens.status().message());
      }
    }
    // A tokenizer that is not readable is said once, by the copy of its files.
  }
  if (!out.generation_config && !out.tokens.empty()) {
    out.generation_config = HfJsonText(out.tokens.ToJson());
    out.generation_from = "written from the ids";
  }
  return out;
}

}  // namespace strata
