// The per-rank layout of a checkpoint: see checkpoint_layout.h.
#include "checkpoint/checkpoint_layout.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace strata {
namespace checkpoint_internal {

std::string RankFileName(int rank) { return absl::StrFormat("rank-%05d.bin", rank); }

QuantizedBlocks BlocksOfRuns(const std::vector<StateRun>& runs) {
  QuantizedBlocks blocks;
  blocks.eight_bit = !runs.empty();
  for (const StateRun& run : runs) {
    if (run.quantized) continue;
    const size_t first = run.begin / kAdamStateBlock;
    const size_t end = (run.end + kAdamStateBlock - 1) / kAdamStateBlock;
    if (!blocks.fp32.empty() && blocks.fp32.back().second == first) {
      blocks.fp32.back().second = end;
    } else {
      blocks.fp32.push_back({first, end});
    }
  }
  return blocks;
}

MomentSections SectionsOver(const QuantizedBlocks& blocks, ShardRange range) {
  MomentSections sections;
  if (range.begin >= range.end) return sections;
  const size_t first = range.begin / kAdamStateBlock;
  const size_t end = (range.end + kAdamStateBlock - 1) / kAdamStateBlock;
  size_t fp32_blocks = end - first;  // all of them unless 8-bit
  if (blocks.eight_bit) {
    fp32_blocks = 0;
    for (const auto& [f, e] : blocks.fp32) {
      const size_t lo = std::max(f, first), hi = std::min(e, end);
      if (lo >= hi) continue;
      fp32_blocks += hi - lo;
      sections.fp32 +=
          std::min(range.end, hi * kAdamStateBlock) - std::max(range.begin, lo * kAdamStateBlock);
    }
  } else {
    sections.fp32 = range.end - range.begin;
  }
  sections.codes = range.end - range.begin - sections.fp32;
  sections.blocks = end - first - fp32_blocks;
  return sections;
}

std::vector<StateRun> RunsOver(const QuantizedBlocks& blocks, ShardRange range) {
  std::vector<StateRun> runs;
  size_t slots[2] = {0, 0};  // fp32, quantized
  if (range.begin >= range.end) return runs;
  for (size_t b = range.begin / kAdamStateBlock; b * kAdamStateBlock < range.end; ++b) {
    const size_t lo = std::max(range.begin, b * kAdamStateBlock);
    const size_t hi = std::min(range.end, (b + 1) * kAdamStateBlock);
    const bool quantized = blocks.quantized(b);
    if (!runs.empty() && runs.back().end == lo && runs.back().quantized == quantized) {
      runs.back().end = hi;
    } else {
      runs.push_back({lo, hi, quantized, false, slots[quantized]});
    }
    slots[quantized] += hi - lo;
  }
  return runs;
}

std::array<ByteCopy, 3> MomentSliceCopies(const QuantizedBlocks& blocks, ShardRange from,
                                          ShardRange to, ShardRange part) {
  const MomentSections all_from = SectionsOver(blocks, from);
  const MomentSections all_to = SectionsOver(blocks, to);
  const MomentSections before_from = SectionsOver(blocks, {from.begin, part.begin});
  const MomentSections before_to = SectionsOver(blocks, {to.begin, part.begin});
  const MomentSections own = SectionsOver(blocks, part);
  return {ByteCopy{before_from.fp32 * 4, before_to.fp32 * 4, own.fp32 * 4},
          ByteCopy{all_from.codes_offset() + before_from.codes,
                   all_to.codes_offset() + before_to.codes, own.codes},
          ByteCopy{all_from.absmax_offset() + before_from.blocks * 4,
                   all_to.absmax_offset() + before_to.blocks * 4, own.blocks * 4}};
}

std::vector<RankPiece> RankFileLayout(const std::vector<size_t>& used,
                                      const std::vector<size_t>& shard_elements,
                                      const std::vector<QuantizedBlocks>& blocks, int rank,
                                      uint64_t* bytes) {
  std::vector<RankPiece> pieces(used.size());
  uint64_t offset = 0;
  for (size_t u = 0; u < used.size(); ++u) {
    RankPiece& piece = pieces[u];
    piece.begin = std::min(used[u], static_cast<size_t>(rank) * shard_elements[u]);
    piece.end = std::min(used[u], piece.begin + shard_elements[u]);
    const bool eight_bit = u < blocks.size() && !blocks[u].empty();
    for (int k = 0; k < 3; ++k) {
      piece.offsets[k] = offset;
      piece.bytes[k] = k > 0 && eight_bit
                           ? SectionsOver(blocks[u], {piece.begin, piece.end}).bytes()
                           : (piece.end - piece.begin) * sizeof(float);
      offset += piece.bytes[k];
    }
  }
  if (bytes != nullptr) *bytes = offset;
  return pieces;
}

}  // namespace checkpoint_internal
}  // namespace strata
