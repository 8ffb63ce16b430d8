// The copy of the run's tokenizer a checkpoint holds: see checkpoint_tokenizer.h.
#include "checkpoint/checkpoint_tokenizer.h"

#include <xxhash.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_format.h"
#include "core/logging.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {

using checkpoint_internal::Hex;
using checkpoint_internal::kTokenizerDir;
using checkpoint_internal::ReadBytes;
using checkpoint_internal::WriteFile;

StatusOr<std::vector<std::pair<std::string, std::string>>> CopyTokenizerFiles(
    const std::string& spec, const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> entries;
  const std::vector<std::pair<std::string, std::string>> files = TokenizerFiles(spec);
  if (files.empty()) return entries;
  std::vector<std::vector<char>> contents;
  for (const auto& [source, name] : files) {
    StatusOr<std::vector<char>> bytes = ReadBytes(source);
    if (!bytes.ok()) {
      spdlog::warn(
          "checkpoint: the tokenizer's file {} is not readable ({}): the checkpoint "
          "records the tokenizer {} without a copy",
          source, std::string(bytes.status().message()), spec);
      return std::vector<std::pair<std::string, std::string>>();
    }
    contents.push_back(std::move(*bytes));
  }
  const std::string into = dir + "/" + kTokenizerDir;
  std::error_code error;
  std::filesystem::create_directory(into, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot create ", into, ": ", error.message()));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const std::vector<char>& bytes = contents[i];
    RETURN_IF_ERROR(WriteFile(into + "/" + files[i].second, {{bytes.data(), bytes.size()}}));
    entries.emplace_back(files[i].second, Hex(XXH3_64bits(bytes.data(), bytes.size())));
  }
  return entries;
}

StatusOr<std::string> CheckpointTokenizer(const OpenedCheckpoint& checkpoint) {
  if (checkpoint.tokenizer_files.empty()) return checkpoint.tokenizer;
  for (const auto& [file, hash] : checkpoint.tokenizer_files) {
    ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadBytes(file));
    const std::string found = Hex(XXH3_64bits(bytes.data(), bytes.size()));
    if (found != hash) {
      return absl::DataLossError(absl::StrCat("checkpoint: the tokenizer file ", file, " has XXH3 ",
                                              found, ", checkpoint.json says ", hash,
                                              " (corrupt or replaced)"));
    }
  }
  return absl::StrCat("hf:", checkpoint.path, "/", kTokenizerDir);
}

}  // namespace strata
