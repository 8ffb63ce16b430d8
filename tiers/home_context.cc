// See home_context.h.
#include "tiers/home_context.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata {

Status CheckHomeContext(const HomeContext& ctx) {
  if (ctx.device == nullptr || ctx.ops == nullptr || ctx.host_ops == nullptr ||
      ctx.compute == nullptr || ctx.comm == nullptr || ctx.copy == nullptr ||
      ctx.host == nullptr || ctx.layouts == nullptr || ctx.units == nullptr) {
    return absl::InvalidArgumentError("a state home needs a device, both kernel sets, four "
                                      "streams, the layouts and the unit state");
  }
  return absl::OkStatus();
}

std::vector<std::vector<NvmeChunk>> NvmeChunks(const std::vector<size_t>& shard_elements,
                                              size_t chunk_elements, int first_id) {
  std::vector<std::vector<NvmeChunk>> chunks(shard_elements.size());
  int id = first_id;
  for (size_t u = 0; u < shard_elements.size(); ++u) {
    for (size_t begin = 0; begin < shard_elements[u]; begin += chunk_elements) {
      chunks[u].push_back({id++, begin, std::min(shard_elements[u], begin + chunk_elements)});
    }
  }
  return chunks;
}

Status CheckNvmeChunks(const HomeContext& ctx,
                       const std::vector<std::vector<NvmeChunk>>& chunks) {
  if (chunks.size() != ctx.units->size()) {
    return absl::InvalidArgumentError(absl::StrCat("nvme chunks for ", chunks.size(),
                                                   " units, the model has ",
                                                   ctx.units->size()));
  }
  for (size_t u = 0; u < chunks.size(); ++u) {
    // A frozen unit has no optimizer state or gradient sums to keep.
    if (chunks[u].empty() && !(*ctx.layouts)[u].trainable()) continue;
    size_t at = 0;
    for (const NvmeChunk& chunk : chunks[u]) {
      if (chunk.begin != at || chunk.end <= chunk.begin) break;
      at = chunk.end;
    }
    if (at != (*ctx.units)[u].shard_elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit ", (*ctx.layouts)[u].name(), ": its nvme chunks cover ", at, " of ",
          (*ctx.units)[u].shard_elements, " shard elements"));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
