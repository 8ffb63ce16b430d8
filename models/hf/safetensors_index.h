// A sharded safetensors set (internal: in the library's srcs): model.safetensors.index.json
// read strictly, every shard its "weight_map" names opened and checked (safetensors_header.h),
// and the index and the shards checked against each other. SafetensorsSet::OpenDirectory
// turns the result into a set.
// Invariants: a ParsedSet is returned only when every shard passed ParseFile, every tensor
// sits in exactly one shard, and that is the shard the weight_map names for it (no tensor
// of a shard missing from the map, none of the map missing from its shard); shard names
// are relative paths that stay inside the directory. Errors name the index (or the shard)
// and the tensor.
// Thread-safety: ParseShardedSet may run on several threads at once; its result is a value
// owned by its caller.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/hf/safetensors_common.h"
#include "models/hf/safetensors_format.h"

namespace strata {
namespace safetensors_internal {

// The checked shards of a set: their tensors (in the order of the shards' file names, each
// shard's in header order), the metadata of the first shard by file name, and the open
// files (path, descriptor).
struct ParsedSet {
  std::vector<StTensor> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, ScopedFd>> files;
};

// Reads the index at `index_path` (in `dir`) and opens and checks the shards it names.
StatusOr<ParsedSet> ParseShardedSet(const std::string& dir, const std::string& index_path);

}  // namespace safetensors_internal
}  // namespace strata
