// One safetensors file opened and its header checked completely (internal: in the library's
// srcs): the 8-byte length, the JSON, every tensor entry (dtype, shape, data_offsets) against
// the file, and the layout of the data section (no overlap, no gap, no trailing bytes). The
// reader of one file and of a sharded set (safetensors_index.h) both start here.
// Invariants: a ParsedFile is returned only when every check of safetensors.h passed, so
// its tensors' byte ranges lie inside the file; each error names the file, the tensor where
// there is one, and the problem.
// Thread-safety: ParseFile may run on several threads at once (for different files or
// not); a ParsedFile is a value owned by its caller.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/hf/safetensors_common.h"
#include "models/hf/safetensors_format.h"

namespace strata {
namespace safetensors_internal {

// One file's checked header: its tensors (absolute offsets) and metadata, and the open file.
struct ParsedFile {
  ScopedFd fd;
  std::vector<StTensor> tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

// Opens `path` and checks its header and layout completely (see safetensors.h).
StatusOr<ParsedFile> ParseFile(const std::string& path);

}  // namespace safetensors_internal
}  // namespace strata
