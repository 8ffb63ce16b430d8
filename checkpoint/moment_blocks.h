// Which blocks of a unit's Adam moment a checkpoint holds as 8-bit codes (format 8;
// docs/checkpoints.md "8-bit Adam states"): the manifest's "fp32_blocks" as read, shared
// by the reader (checkpoint_open.h) and the layout (checkpoint_layout.h).
// Thread-safety: a plain value.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace strata {

// Which blocks of kAdamStateBlock = 2048 elements of a unit hold an Adam moment's 8-bit
// codes: none (`eight_bit` false: an f32 array), or all but the fp32 ones, listed as ordered
// [first, end) ranges of block numbers (a checkpoint's "fp32_blocks"; its size bounded by
// the list, not by the unit).
struct MomentBlocks {
  bool eight_bit = false;
  std::vector<std::pair<size_t, size_t>> fp32;
  bool empty() const { return !eight_bit; }
  // Whether block `block` holds 8-bit moments (an 8-bit array's block not listed as fp32).
  bool quantized(size_t block) const;
};

inline bool MomentBlocks::quantized(size_t block) const {
  if (!eight_bit) return false;
  // The last fp32 range starting at or before the block.
  auto after = std::upper_bound(
      fp32.begin(), fp32.end(), block,
      [](size_t b, const std::pair<size_t, size_t>& range) { return b < range.first; });
  return after == fp32.begin() || std::prev(after)->second <= block;
}

}  // namespace strata
