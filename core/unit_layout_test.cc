// Unit layouts: aligned tensor offsets, padding into equal 4 KiB-aligned shards.
#include "core/unit_layout.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(UnitLayout, AlignsTensorsAndCountsParams) {
  UnitLayout unit("block");
  unit.Add("a", {3, 5}, true, InitKind::kNormal, 0.02f);
  unit.Add("b", {7}, false, InitKind::kZeros);
  EXPECT_EQ(unit.tensor(0).offset, 0u);
  EXPECT_EQ(unit.tensor(1).offset, 16u);  // 15 rounded up to 16
  EXPECT_EQ(unit.num_params(), 22u);
  EXPECT_EQ(unit.used_elements(), 23u);
}

TEST(UnitLayout, PadsToEqualAlignedShards) {
  UnitLayout unit("u");
  unit.Add("w", {5000}, true, InitKind::kZeros);
  for (int world : {1, 2, 3, 4, 7}) {
    size_t padded = unit.PaddedElements(world);
    EXPECT_GE(padded, 5000u);
    EXPECT_EQ(padded % world, 0u);
    size_t shard = unit.ShardElements(world);
    EXPECT_EQ(shard * world, padded);
    EXPECT_EQ((shard * 2) % 4096, 0u) << "bf16 shard not 4 KiB aligned, world " << world;
    EXPECT_EQ((shard * 4) % 4096, 0u) << "fp32 shard not 4 KiB aligned, world " << world;
    EXPECT_LT(padded - 5000u, kShardAlignElements * world);  // no more padding than needed
  }
}

}  // namespace
}  // namespace strata
