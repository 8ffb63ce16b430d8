// The per-rank layout of a checkpoint: see checkpoint_layout.h.
#include "checkpoint/checkpoint_layout.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace strata {
namespace checkpoint_internal {

std::string RankFileName(int rank) { return absl::StrFormat("rank-%05d.bin", rank); }

std::vector<RankPiece> RankFileLayout(const std::vector<size_t>& used,
                                      const std::vector<size_t>& shard_elements, int rank,
                                      uint64_t* bytes) {
  std::vector<RankPiece> pieces(used.size());
  uint64_t offset = 0;
  for (size_t u = 0; u < used.size(); ++u) {
    RankPiece& piece = pieces[u];
    piece.begin = std::min(used[u], static_cast<size_t>(rank) * shard_elements[u]);
    piece.end = std::min(used[u], piece.begin + shard_elements[u]);
    for (int k = 0; k < 3; ++k) {
      piece.offsets[k] = offset;
      offset += (piece.end - piece.begin) * sizeof(float);
    }
  }
  if (bytes != nullptr) *bytes = offset;
  return pieces;
}

}  // namespace checkpoint_internal
}  // namespace strata
