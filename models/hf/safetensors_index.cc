// A sharded safetensors set read from its index; see safetensors_index.h.
#include "models/hf/safetensors_index.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/pread_fully.h"
#include "models/hf/safetensors_header.h"

namespace strata {
namespace safetensors_internal {
namespace {

// The whole (small) file at `path`.
StatusOr<std::string> ReadSmallFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto opened, OpenRegular(path));
  if (opened.second > kMaxHeaderBytes) {
    return InvalidFile(path, absl::StrCat("has ", opened.second,
                                          " bytes, more than an index "
                                          "may (100 MiB)"));
  }
  std::string text(opened.second, '\0');
  RETURN_IF_ERROR(
      PreadFully(opened.first.get(), text.data(), text.size(), 0, "safetensors: " + path));
  return text;
}

// A shard file named in an index must lie in the index's directory or below it.
bool IsPlainRelativePath(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : std::filesystem::path(name)) {
    if (part == "..") return false;
  }
  return true;
}

// What an index says: the tensors it puts in each shard, and the shard of each tensor.
struct WeightMap {
  std::map<std::string, std::set<std::string>> by_shard;  // shard file -> its tensors
  std::map<std::string, std::string> shard_of;            // tensor -> its shard file
};

// The index at `index_path`, parsed strictly; each shard a relative path inside its directory.
StatusOr<WeightMap> ReadWeightMap(const std::string& index_path) {
  ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(index_path));
  nlohmann::json index;
  std::string duplicate;
  const std::string problem = ParseJsonStrict(text, &index, &duplicate);
  if (!problem.empty()) return InvalidFile(index_path, problem);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return InvalidFile(index_path, "is not a JSON object with a \"weight_map\" object");
  }
  WeightMap map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string() || !IsPlainRelativePath(shard.get<std::string>())) {
      return InvalidFile(index_path,
                         absl::StrCat("weight_map: tensor '", name, "' maps to ", shard.dump(),
                                      ", not a file name in the directory"));
    }
    map.by_shard[shard.get<std::string>()].insert(name);
    map.shard_of[name] = shard.get<std::string>();
  }
  return map;
}

// Opens and checks one shard (`names`: the tensors the index puts there) and adds it to
// *set; *found_in (tensor -> the shard holding it) gains its tensors.
Status AddShard(const std::string& dir, const std::string& index_path, const std::string& shard,
                const std::set<std::string>& names, const WeightMap& map,
                std::map<std::string, std::string>* found_in, ParsedSet* set) {
  const std::string path = dir + "/" + shard;
  if (!FileExists(path)) {
    return LostFile(
        index_path,
        absl::StrCat("shard ", shard, " (holding '", *names.begin(), "'",
                     names.size() > 1 ? absl::StrCat(" and ", names.size() - 1, " more") : "",
                     ") is missing: no file ", path));
  }
  ASSIGN_OR_RETURN(ParsedFile parsed, ParseFile(path));
  if (set->files.empty()) set->metadata = parsed.metadata;
  for (StTensor& tensor : parsed.tensors) {
    const auto [previous, inserted] = found_in->emplace(tensor.name, shard);
    if (!inserted) {
      return InvalidFile(index_path, absl::StrCat("tensor '", tensor.name, "' is in two shards: ",
                                                  previous->second, " and ", shard));
    }
    const auto listed = map.shard_of.find(tensor.name);
    if (listed == map.shard_of.end()) {
      return InvalidFile(index_path, absl::StrCat("shard ", shard, " holds tensor '", tensor.name,
                                                  "', which the index's weight_map lacks"));
    }
    set->tensors.push_back(std::move(tensor));
  }
  set->files.emplace_back(path, std::move(parsed.fd));
  return absl::OkStatus();
}

// Every tensor of the weight_map in the shard it names (`found_in`: where each one is).
Status CheckEveryTensorFound(const std::string& index_path, const WeightMap& map,
                             const std::map<std::string, std::string>& found_in) {
  for (const auto& [name, shard] : map.shard_of) {
    const auto found = found_in.find(name);
    if (found == found_in.end() || found->second != shard) {
      return InvalidFile(
          index_path,
          absl::StrCat("weight_map puts tensor '", name, "' in ", shard, ", which does not hold it",
                       found == found_in.end() ? " (no shard does)"
                                               : absl::StrCat(" (", found->second, " does)")));
    }
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<ParsedSet> ParseShardedSet(const std::string& dir, const std::string& index_path) {
  ASSIGN_OR_RETURN(const WeightMap map, ReadWeightMap(index_path));
  ParsedSet set;
  std::map<std::string, std::string> found_in;  // tensor -> the shard holding it
  for (const auto& [shard, names] : map.by_shard) {
    RETURN_IF_ERROR(AddShard(dir, index_path, shard, names, map, &found_in, &set));
  }
  RETURN_IF_ERROR(CheckEveryTensorFound(index_path, map, found_in));
  return set;
}

}  // namespace safetensors_internal
}  // namespace strata
