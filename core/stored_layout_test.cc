#include "core/stored_layout.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

// A block of a small LLaMA-like model: a norm, a fused q|k|v of pieces 64, 32, 32 rows by
// 96 columns, a down matrix of 96 x 40 (3840 elements: 60 blocks), a bias of 50.
UnitLayout Block(bool trainable) {
  UnitLayout block("block 0");
  block.Add("norm", {96}, false, InitKind::kOnes);
  block.MarkLinear(block.Add("qkv", {128, 96}, true, InitKind::kNormal, 0.02f), {64, 32, 32});
  block.MarkLinear(block.Add("down", {96, 40}, true, InitKind::kNormal, 0.02f));
  block.Add("bias", {50}, false, InitKind::kZeros);
  block.MarkLinear(block.Add("odd", {3, 7}, true, InitKind::kNormal, 0.02f));  // 21: one padded block
  block.set_trainable(trainable);
  return block;
}

TEST(StoredLayout, TrainableOrTrainBaseOrNoMatrixIsNotPacked) {
  EXPECT_FALSE(StoredUnit::Of(Block(true), BaseDType::kNF4, DType::kBF16).packed());
  EXPECT_FALSE(StoredUnit::Of(Block(false), BaseDType::kTrain, DType::kBF16).packed());
  UnitLayout norm("final norm");
  norm.Add("norm", {96}, false, InitKind::kOnes);
  norm.set_trainable(false);
  EXPECT_FALSE(StoredUnit::Of(norm, BaseDType::kNF4, DType::kBF16).packed());
  const UnitLayout block = Block(true);
  EXPECT_EQ(StoredUnit::Of(block, BaseDType::kNF4, DType::kBF16).StoredLayout(block).used_elements(),
            block.used_elements());
}

TEST(StoredLayout, Nf4PiecesAndRawTensorsInOrder) {
  const UnitLayout block = Block(false);
  const StoredUnit s = StoredUnit::Of(block, BaseDType::kNF4, DType::kBF16);
  ASSERT_TRUE(s.packed());
  ASSERT_EQ(s.tensors().size(), 5u);
  // norm: 96 bf16 = 192 bytes.
  EXPECT_FALSE(s.tensors()[0].quantized);
  EXPECT_EQ(s.tensors()[0].byte, 0u);
  EXPECT_EQ(s.tensors()[0].bytes, 192u);
  // qkv: pieces of 6144, 3072, 3072 elements = 96, 48, 48 blocks.
  const StoredTensor& qkv = s.tensors()[1];
  EXPECT_TRUE(qkv.quantized);
  EXPECT_EQ(qkv.byte, 192u);
  ASSERT_EQ(qkv.pieces.size(), 3u);
  EXPECT_EQ(qkv.pieces[0].first, 0u);
  EXPECT_EQ(qkv.pieces[1].first, 6144u);
  EXPECT_EQ(qkv.pieces[2].first, 9216u);
  // A piece of 96 blocks: 3072 code bytes, 96 absmax codes, one group (4 bytes), the
  // offset (4 bytes), each array 16-aligned: 3072 + 96 + 16 + 16.
  EXPECT_EQ(qkv.pieces[0].layout.bytes, 3072u + 96 + 16 + 16);
  EXPECT_EQ(qkv.pieces[0].byte, 192u);
  EXPECT_EQ(qkv.pieces[1].byte, 192u + 3200);
  EXPECT_EQ(qkv.pieces[1].layout.bytes, 1536u + 48 + 16 + 16);
  EXPECT_EQ(qkv.bytes, 3200u + 2 * 1616);
  EXPECT_EQ(s.tensors()[2].byte, 192u + 3200 + 2 * 1616);
  // The odd 3 x 7 matrix is one padded block of 64: 43 padding elements.
  EXPECT_EQ(s.padding_elements(), 43u);
  for (const StoredTensor& t : s.tensors()) EXPECT_EQ(t.byte % kQuantArrayAlign, 0u);
  const StoredTensor& last = s.tensors().back();
  EXPECT_EQ(s.bytes(), AlignQuant(last.byte + last.bytes));
  EXPECT_EQ(s.stored_elements(), s.bytes() / 2);
  const UnitLayout stored = s.StoredLayout(block);
  EXPECT_EQ(stored.name(), "block 0");
  EXPECT_FALSE(stored.trainable());
  EXPECT_EQ(stored.used_elements(), s.stored_elements());
  // About half a byte per matrix element plus the bf16 rest: well under the bf16 unit.
  EXPECT_LT(s.bytes() * 3, block.used_elements() * 2);
}

TEST(StoredLayout, Int8AndBf16Sizes) {
  const UnitLayout block = Block(false);
  const StoredUnit i8 = StoredUnit::Of(block, BaseDType::kInt8, DType::kF32);
  // down: 3840 = 60 blocks: 3840 codes + 240 absmax bytes.
  EXPECT_EQ(i8.tensors()[2].bytes, 3840u + 240);
  EXPECT_EQ(i8.tensors()[0].bytes, 96u * 4);  // fp32 norm
  const StoredUnit b = StoredUnit::Of(block, BaseDType::kBF16, DType::kF32);
  EXPECT_EQ(b.tensors()[2].bytes, 3840u * 2);
  EXPECT_EQ(b.padding_elements(), 0u);
}

}  // namespace
}  // namespace strata
