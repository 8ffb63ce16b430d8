// The layout of 8-bit moments in a checkpoint (checkpoint_layout.h): the stored form's
// sections over any block-aligned range, and the slices that cut a unit's form into rank
// shards and put shards back together (a reader's range spanning two writers' shards), on a
// hand-made pattern of fp32 and 8-bit blocks with a partial last block.
#include "checkpoint/checkpoint_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace strata {
namespace checkpoint_internal {
namespace {

constexpr size_t B = kAdamStateBlock;

// Blocks 0 and 3-4 fp32, the rest 8-bit, over 7 blocks with 100 elements in the last.
QuantizedBlocks Pattern() {
  QuantizedBlocks blocks;
  blocks.eight_bit = true;
  blocks.fp32 = {{0, 1}, {3, 5}};
  return blocks;
}
constexpr size_t kElements = 6 * B + 100;

// The stored form of fp32 values over `range` by the blocks.
std::vector<uint8_t> Form(const QuantizedBlocks& blocks, ShardRange range,
                          const std::vector<float>& values, bool is_signed) {
  std::vector<uint8_t> form(SectionsOver(blocks, range).bytes());
  MomentFromFp32(RunsOver(blocks, range), is_signed, values.data() + range.begin, form.data());
  return form;
}

TEST(CheckpointLayout, SectionsCountBlocksAndElements) {
  const QuantizedBlocks blocks = Pattern();
  EXPECT_FALSE(blocks.quantized(0));
  EXPECT_TRUE(blocks.quantized(1));
  EXPECT_TRUE(blocks.quantized(2));
  EXPECT_FALSE(blocks.quantized(3));
  EXPECT_FALSE(blocks.quantized(4));
  EXPECT_TRUE(blocks.quantized(5));
  EXPECT_TRUE(blocks.quantized(6));
  const MomentSections all = SectionsOver(blocks, {0, kElements});
  EXPECT_EQ(all.fp32, 3 * B);
  EXPECT_EQ(all.codes, 3 * B + 100);
  EXPECT_EQ(all.blocks, 4u);  // the partial last block counted
  EXPECT_EQ(all.bytes(), 4 * 3 * B + 3 * B + 100 + 4 * 4);
  const MomentSections middle = SectionsOver(blocks, {2 * B, 4 * B});
  EXPECT_EQ(middle.fp32, B);
  EXPECT_EQ(middle.codes, B);
  EXPECT_EQ(middle.blocks, 1u);
  EXPECT_EQ(SectionsOver(blocks, {kElements, kElements}).bytes(), 0u);
  // An f32 array: every element fp32.
  EXPECT_EQ(SectionsOver(QuantizedBlocks{}, {B, 3 * B}).fp32, 2 * B);
  // The runs agree with the sections (MomentFromFp32 fills exactly SectionsOf(runs)).
  EXPECT_EQ(SectionsOf(RunsOver(blocks, {0, kElements})).bytes(), all.bytes());
  const QuantizedBlocks back = BlocksOfRuns(RunsOver(blocks, {0, kElements}));
  EXPECT_EQ(back.fp32, blocks.fp32);
}

// Cut into the shards of 3 writers (3 blocks each; the last shard partial) and put back
// together over a reader's range that spans two shards: the bytes of the form the reader
// would have made itself.
TEST(CheckpointLayout, ShardSlicesPutBackTogetherAreTheForm) {
  const QuantizedBlocks blocks = Pattern();
  std::vector<float> values(kElements);
  for (size_t i = 0; i < kElements; ++i) values[i] = 1e-3f * std::sin(0.01f * i);
  for (const bool is_signed : {true, false}) {
    std::vector<float> x = values;
    if (!is_signed) {
      for (float& v : x) v = v * v;
    }
    const std::vector<uint8_t> whole = Form(blocks, {0, kElements}, x, is_signed);
    std::vector<std::vector<uint8_t>> shards;
    std::vector<ShardRange> ranges;
    for (size_t begin = 0; begin < kElements; begin += 3 * B) {
      const ShardRange shard{begin, std::min(kElements, begin + 3 * B)};
      std::vector<uint8_t> bytes(SectionsOver(blocks, shard).bytes());
      for (const ByteCopy& copy : MomentSliceCopies(blocks, {0, kElements}, shard, shard)) {
        std::memcpy(bytes.data() + copy.to, whole.data() + copy.from, copy.bytes);
      }
      EXPECT_EQ(bytes, Form(blocks, shard, x, is_signed)) << begin;
      shards.push_back(std::move(bytes));
      ranges.push_back(shard);
    }
    ASSERT_EQ(shards.size(), 3u);
    const ShardRange reader{2 * B, kElements};  // spans shards 0, 1 and 2
    std::vector<uint8_t> read(SectionsOver(blocks, reader).bytes(), 0xee);
    for (size_t s = 0; s < shards.size(); ++s) {
      const ShardRange part{std::max(reader.begin, ranges[s].begin),
                            std::min(reader.end, ranges[s].end)};
      if (part.begin >= part.end) continue;
      for (const ByteCopy& copy : MomentSliceCopies(blocks, ranges[s], reader, part)) {
        std::memcpy(read.data() + copy.to, shards[s].data() + copy.from, copy.bytes);
      }
    }
    EXPECT_EQ(read, Form(blocks, reader, x, is_signed));
  }
}

// A rank file's pieces: the master 4 bytes an element, each 8-bit moment its form's bytes.
TEST(CheckpointLayout, RankFilesHoldTheStoredForms) {
  const std::vector<size_t> used = {kElements, 5000};
  const std::vector<size_t> shards = {3 * B, 4096};
  const std::vector<QuantizedBlocks> blocks = {Pattern(), {}};
  uint64_t bytes = 0;
  const std::vector<RankPiece> pieces = RankFileLayout(used, shards, blocks, 2, &bytes);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].begin, 6 * B);
  EXPECT_EQ(pieces[0].end, kElements);
  EXPECT_EQ(pieces[0].bytes[0], 4 * 100u);
  EXPECT_EQ(pieces[0].bytes[1], 100u + 4);  // one partial 8-bit block: codes and absmax
  EXPECT_EQ(pieces[0].offsets[2], pieces[0].bytes[0] + pieces[0].bytes[1]);
  EXPECT_EQ(pieces[1].begin, 5000u);  // all padding at rank 2: nothing
  EXPECT_EQ(pieces[1].end, 5000u);
  EXPECT_EQ(bytes, pieces[0].bytes[0] + 2 * pieces[0].bytes[1]);
}

}  // namespace
}  // namespace checkpoint_internal
}  // namespace strata
