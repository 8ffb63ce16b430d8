// The per-rank layout of a checkpoint (format version 6; internal: in the library's srcs,
// so nothing outside checkpoint/ can include it). Rank r of a run of `world` ranks owns
// shard r of every unit (elements [r * S, (r + 1) * S) of the unit padded to `world`
// equal shards of S elements); its file rank-<r>.bin holds, unit after unit (trainable
// units, in model order), the fp32 master, exp_avg and exp_avg_sq over the part of its
// shard that lies within the unit's used elements (nothing where the shard is all
// padding). The writer and the manifest both derive the offsets from this one function,
// and the reader takes them from the manifest, never from the rule.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {
namespace checkpoint_internal {

// The three arrays of a unit's optimizer state, in file order, as the manifest names them.
inline constexpr const char* kArrayNames[3] = {"master", "exp_avg", "exp_avg_sq"};

// "rank-00003.bin".
std::string RankFileName(int rank);

// One unit's piece of one rank's file: used elements [begin, end) of the unit, array k at
// byte `offsets[k]` of the file (begin == end: the rank holds none of its used elements).
struct RankPiece {
  size_t begin = 0, end = 0;
  uint64_t offsets[3] = {0, 0, 0};
};

// The pieces of rank `rank`'s file, one per unit, for units of `used` elements each whose
// shards are `shard_elements[u]` long (the padded unit / world); `bytes` (may be null)
// gets the file's size.
std::vector<RankPiece> RankFileLayout(const std::vector<size_t>& used,
                                      const std::vector<size_t>& shard_elements, int rank,
                                      uint64_t* bytes);

}  // namespace checkpoint_internal
}  // namespace strata
