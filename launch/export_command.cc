// `strata export`: see commands.h and export_weights.h.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/memory.h"
#include "launch/commands.h"
#include "launch/export_weights.h"

namespace strata {

Status RunExport(const std::string& from, const std::string& to, DType dtype,
                 const std::string& shard_size, bool merge_lora) {
  ExportRequest request;
  request.from = from;
  request.to = to;
  request.dtype = dtype;
  request.merge_lora = merge_lora;
  StatusOr<uint64_t> shard = ParseBytes(shard_size);
  if (!shard.ok() || *shard == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: --shard-size '", shard_size, "': expected a size like 5GiB"));
  }
  request.max_shard_bytes = *shard;
  ASSIGN_OR_RETURN(const std::string done, ExportWeights(request));
  std::printf("%s\n", done.c_str());
  return absl::OkStatus();
}

}  // namespace strata
