// What a checkpoint keeps of the model's source: see checkpoint_source.h.
#include "checkpoint/checkpoint_source.h"

#include <xxhash.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_format.h"
#include "core/logging.h"
#include "models/hf/hf_special_tokens.h"

namespace strata {

using checkpoint_internal::Hex;
using checkpoint_internal::kGenerationConfig;
using checkpoint_internal::kSourceDir;
using checkpoint_internal::ReadBytes;
using checkpoint_internal::WriteFile;

namespace {

// DIR of "hf:DIR", or "" for another source.
std::string HfDir(const std::string& model_from) {
  return absl::StartsWith(model_from, "hf:") ? model_from.substr(3) : "";
}

}  // namespace

uint64_t ModelSourceBytes(const std::string& model_from) {
  const std::string dir = HfDir(model_from);
  if (dir.empty()) return 0;
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(dir + "/" + kGenerationConfig, error);
  return error ? 0 : size;
}

StatusOr<nlohmann::json> CopyModelSource(const std::string& model_from, const std::string& dir) {
  const std::string source = HfDir(model_from);
  if (source.empty()) return nlohmann::json();
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(source, error);
  nlohmann::json record = {{"from", "hf:" + (error ? source : absolute.string())}};
  StatusOr<HfSpecialTokens> tokens = ReadHfSpecialTokens(source);
  if (tokens.ok()) {
    record.update(tokens->ToJson());
  } else {
    spdlog::warn(
        "checkpoint: the model's source {}: {}: the checkpoint keeps no special-token ids of "
        "it (an export writes the tokenizer's)",
        model_from, std::string(tokens.status().message()));
  }
  nlohmann::json files = nlohmann::json::array();
  const std::string generation = source + "/" + kGenerationConfig;
  if (std::filesystem::exists(generation, error)) {
    StatusOr<std::vector<char>> bytes = ReadBytes(generation);
    if (bytes.ok()) {
      const std::string into = dir + "/" + kSourceDir;
      std::filesystem::create_directory(into, error);
      if (error) {
        return absl::InternalError(
            absl::StrCat("checkpoint: cannot create ", into, ": ", error.message()));
      }
      RETURN_IF_ERROR(WriteFile(into + "/" + kGenerationConfig, {{bytes->data(), bytes->size()}}));
      files.push_back(
          {{"name", kGenerationConfig}, {"xxh3", Hex(XXH3_64bits(bytes->data(), bytes->size()))}});
    } else {
      spdlog::warn("checkpoint: the model's {} is not readable ({}): the checkpoint keeps no copy",
                   generation, std::string(bytes.status().message()));
    }
  }
  if (!files.empty()) record["files"] = std::move(files);
  return record;
}

StatusOr<std::optional<std::string>> CheckpointGenerationConfig(
    const OpenedCheckpoint& checkpoint) {
  for (const auto& [file, hash] : checkpoint.source_files) {
    if (std::filesystem::path(file).filename() != kGenerationConfig) continue;
    ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadBytes(file));
    const std::string found = Hex(XXH3_64bits(bytes.data(), bytes.size()));
    if (found != hash) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", file, " has XXH3 ", found,
                                              ", checkpoint.json says ", hash,
                                              " (corrupt or replaced)"));
    }
    return std::optional<std::string>(std::string(bytes.begin(), bytes.end()));
  }
  return std::optional<std::string>();
}

}  // namespace strata
