// The per-rank layout of a checkpoint (format version 6 on; internal: in the library's srcs,
// so nothing outside checkpoint/ can include it). Rank r of a run of `world` ranks owns
// shard r of every unit (elements [r * S, (r + 1) * S) of the unit padded to `world`
// equal shards of S elements); its file rank-<r>.bin holds, unit after unit (trainable
// units, in model order), the fp32 master, exp_avg and exp_avg_sq over the part of its
// shard that lies within the unit's used elements (nothing where the shard is all
// padding). With 8-bit Adam states (version 8) a unit's exp_avg and exp_avg_sq are in
// their stored form over that part (tiers/state_blocks.h: the fp32 runs' values, the
// quantized runs' codes, the quantized blocks' absmaxes, a last partial block counted),
// which the unit's quantized blocks (QuantizedBlocks) size. The writer and the manifest
// both derive the offsets from this one function, and the reader takes them from the
// manifest, never from the rule.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/moment_blocks.h"
#include "tiers/state_blocks.h"
#include "tiers/unit_state.h"

namespace strata {
namespace checkpoint_internal {

// The three arrays of a unit's optimizer state, in file order, as the manifest names them.
inline constexpr const char* kArrayNames[3] = {"master", "exp_avg", "exp_avg_sq"};
// The dtypes of an 8-bit moment array (version 8): exp_avg's codes are of the signed
// dynamic map, exp_avg_sq's of the unsigned one (docs/quantization.md); blocks of
// kAdamStateBlock elements, an fp32 absmax ("scales": "f32") per quantized block.
inline constexpr const char* kMomentDTypes[3] = {"f32", "q8-dynamic-signed", "q8-dynamic-unsigned"};

// "rank-00003.bin".
std::string RankFileName(int rank);

// Which blocks of kAdamStateBlock elements of a unit hold 8-bit moments (moment_blocks.h).
// Empty: a unit with fp32 moments alone (train.optimizer_states = fp32), stored as plain
// f32 arrays.
using QuantizedBlocks = MomentBlocks;

// The blocks of `runs` (a state range's runs: blocks outside them count as 8-bit).
QuantizedBlocks BlocksOfRuns(const std::vector<StateRun>& runs);
// The sections of a moment's stored form over elements [range.begin, range.end) (begin on a
// block boundary; end on one or at the end of the elements stored). O(fp32 ranges), however
// large the range (a manifest's numbers are not trusted to be small).
MomentSections SectionsOver(const QuantizedBlocks& blocks, ShardRange range);
// The runs of `range` (slots from its start, as StateRuns numbers them; weight_decay false:
// storage only), for MomentToFp32 and MomentFromFp32.
std::vector<StateRun> RunsOver(const QuantizedBlocks& blocks, ShardRange range);
// One section's bytes of the stored form of `part`, from a form over `from` to one over `to`.
struct ByteCopy {
  uint64_t from = 0, to = 0, bytes = 0;
};
// The three copies (fp32 values, codes, absmaxes) that move the stored form of `part` from
// a form over `from` into a form over `to` (`part` within both; every begin on a block
// boundary; part's end on one, or at the end of both where one of them ends there).
std::array<ByteCopy, 3> MomentSliceCopies(const QuantizedBlocks& blocks, ShardRange from,
                                          ShardRange to, ShardRange part);

// One unit's piece of one rank's file: used elements [begin, end) of the unit, array k at
// byte `offsets[k]` of the file, `bytes[k]` long (begin == end: the rank holds none of its
// used elements).
struct RankPiece {
  size_t begin = 0, end = 0;
  uint64_t offsets[3] = {0, 0, 0};
  uint64_t bytes[3] = {0, 0, 0};
};

// The pieces of rank `rank`'s file, one per unit, for units of `used` elements each whose
// shards are `shard_elements[u]` long (the padded unit / world) and whose moments are
// 8-bit where `blocks[u]` (empty, or no entry: fp32) says; `bytes` (may be null) gets the
// file's size.
std::vector<RankPiece> RankFileLayout(const std::vector<size_t>& used,
                                      const std::vector<size_t>& shard_elements,
                                      const std::vector<QuantizedBlocks>& blocks, int rank,
                                      uint64_t* bytes);

}  // namespace checkpoint_internal
}  // namespace strata
