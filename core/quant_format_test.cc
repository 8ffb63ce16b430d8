// quant_format.h: each format's piece layout (sizes, offsets, alignment, padding), the NF4
// values and the dynamic maps (count, order, endpoints, a few exact values).
#include "core/quant_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace strata {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

TEST(PieceLayoutTest, Nf4) {
  // 4096 + 17 values: 65 blocks (the last padded), one group.
  const QuantPiece p = PieceLayout(BaseDType::kNF4, 4096 + 17);
  EXPECT_EQ(p.elements, 4113u);
  EXPECT_EQ(p.blocks, 65u);
  EXPECT_EQ(p.groups, 1u);
  EXPECT_TRUE(p.padded());
  EXPECT_EQ(p.codes, 0u);
  EXPECT_EQ(p.code_bytes, 65u * 32);  // 2080, a multiple of 16
  EXPECT_EQ(p.absmax, 2080u);
  EXPECT_EQ(p.absmax_bytes, 65u);
  EXPECT_EQ(p.absmax2, 2080u + 80);  // 65 rounded up to 80
  EXPECT_EQ(p.absmax2_bytes, 4u);
  EXPECT_EQ(p.offset, 2160u + 16);
  EXPECT_EQ(p.offset_bytes, 4u);
  EXPECT_EQ(p.bytes, 2192u);
}

TEST(PieceLayoutTest, Nf4ManyGroups) {
  // 257 blocks of 64: two absmax groups, no padding.
  const QuantPiece p = PieceLayout(BaseDType::kNF4, 257 * 64);
  EXPECT_EQ(p.blocks, 257u);
  EXPECT_EQ(p.groups, 2u);
  EXPECT_FALSE(p.padded());
  EXPECT_EQ(p.code_bytes, 257u * 32);
  EXPECT_EQ(p.absmax, 8224u);
  EXPECT_EQ(p.absmax2, 8224u + 272);
  EXPECT_EQ(p.absmax2_bytes, 8u);
  EXPECT_EQ(p.offset, 8496u + 16);
  EXPECT_EQ(p.bytes, 8528u);
}

TEST(PieceLayoutTest, Int8) {
  const QuantPiece p = PieceLayout(BaseDType::kInt8, 100);
  EXPECT_EQ(p.blocks, 2u);
  EXPECT_EQ(p.groups, 0u);
  EXPECT_TRUE(p.padded());
  EXPECT_EQ(p.codes, 0u);
  EXPECT_EQ(p.code_bytes, 128u);
  EXPECT_EQ(p.absmax, 128u);
  EXPECT_EQ(p.absmax_bytes, 8u);
  EXPECT_EQ(p.absmax2_bytes, 0u);
  EXPECT_EQ(p.offset_bytes, 0u);
  EXPECT_EQ(p.bytes, 144u);
}

TEST(PieceLayoutTest, Bf16AndTrain) {
  const QuantPiece bf16 = PieceLayout(BaseDType::kBF16, 101);
  EXPECT_EQ(bf16.blocks, 0u);
  EXPECT_FALSE(bf16.padded());
  EXPECT_EQ(bf16.code_bytes, 202u);
  EXPECT_EQ(bf16.absmax_bytes, 0u);
  EXPECT_EQ(bf16.bytes, 208u);
  const QuantPiece train = PieceLayout(BaseDType::kTrain, 101);
  EXPECT_EQ(train.bytes, 0u);
  EXPECT_EQ(PieceLayout(BaseDType::kNF4, 0).bytes, 16u);  // the offset alone
}

TEST(PieceLayoutTest, EveryArrayAligned) {
  for (BaseDType dtype : {BaseDType::kBF16, BaseDType::kInt8, BaseDType::kNF4}) {
    for (size_t n : {1, 63, 64, 65, 100, 4113, 16384, 16385, 1000003}) {
      const QuantPiece p = PieceLayout(dtype, n);
      SCOPED_TRACE(testing::Message() << BaseDTypeName(dtype) << " n=" << n);
      EXPECT_EQ(p.codes % kQuantArrayAlign, 0u);
      EXPECT_EQ(p.absmax % kQuantArrayAlign, 0u);
      EXPECT_EQ(p.absmax2 % kQuantArrayAlign, 0u);
      EXPECT_EQ(p.offset % kQuantArrayAlign, 0u);
      EXPECT_EQ(p.bytes % kQuantArrayAlign, 0u);
      EXPECT_GE(p.bytes, p.offset + p.offset_bytes);
      EXPECT_GE(p.bytes, p.absmax + p.absmax_bytes);
      if (dtype != BaseDType::kBF16) EXPECT_EQ(p.blocks, (n + 63) / 64);
    }
  }
}

TEST(QuantTablesTest, Nf4Values) {
  const std::array<float, 16>& v = Nf4Values();
  EXPECT_EQ(v[0], -1.0f);
  EXPECT_EQ(v[7], 0.0f);
  EXPECT_EQ(v[15], 1.0f);
  EXPECT_EQ(v[1], -0.6961928009986877f);
  EXPECT_EQ(v[14], 0.7229568362236023f);
  EXPECT_EQ(Bits(v[8]), Bits(0.07958029955625534f));
  for (int i = 0; i + 1 < 16; ++i) EXPECT_LT(v[i], v[i + 1]) << i;
}

TEST(QuantTablesTest, SignedDynamicMap) {
  const std::array<float, 256>& map = DynamicMap(true);
  for (int i = 0; i + 1 < 256; ++i) EXPECT_LT(map[i], map[i + 1]) << i;
  // 127 negative values, 0, 127 positive midpoints and 1.
  EXPECT_EQ(map[127], 0.0f);
  EXPECT_EQ(map[255], 1.0f);
  EXPECT_EQ(map[0], -0.99296875f);  // -(0.9859375 + 1) / 2: the top decade's last midpoint
  EXPECT_EQ(map[254], 0.99296875f);
  EXPECT_EQ(map[128], 5.5e-7f);  // (0.1 + 1) / 2 * 1e-6
  EXPECT_EQ(map[126], -5.5e-7f);
  EXPECT_EQ(map[129], 3.25e-6f);  // decade 1: boundaries 0.1, 0.55, 1 -> 0.325e-5
  EXPECT_EQ(map[200], 0.23359375f);
  for (int i = 0; i < 127; ++i) EXPECT_EQ(map[i], -map[254 - i]) << i;
}

TEST(QuantTablesTest, UnsignedDynamicMap) {
  const std::array<float, 256>& map = DynamicMap(false);
  for (int i = 0; i + 1 < 256; ++i) EXPECT_LT(map[i], map[i + 1]) << i;
  EXPECT_EQ(map[0], 0.0f);
  EXPECT_EQ(map[255], 1.0f);
  EXPECT_EQ(map[1], 3.25e-7f);  // decade 0: boundaries 0.1, 0.55, 1 -> 0.325e-6
  EXPECT_EQ(map[254], 0.99648437f);
  EXPECT_EQ(map[200], 0.61679685f);
  EXPECT_EQ(map[127], 0.103515625f);  // decade 6, first midpoint: (0.1 + 0.10703125) / 2
  EXPECT_EQ(Bits(map[128]), Bits(0x1.c4ccccp-4f));
}

}  // namespace
}  // namespace strata
