// Tests pool accounting: capacity errors name tier, kind and bytes.
#include "device/memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

TEST(MemoryPool, TracksCurrentAndPeakByKind) {
  MemoryPool pool(Tier::kDevice, 1000, "device.memory_limit");
  ASSERT_OK(pool.Reserve(StateKind::kParams, 300, "w"));
  ASSERT_OK(pool.Reserve(StateKind::kGrads, 500, "g"));
  pool.Release(StateKind::kGrads, 500);
  ASSERT_OK(pool.Reserve(StateKind::kActivations, 100, "a"));
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.current_bytes, 400u);
  EXPECT_EQ(stats.peak_bytes, 800u);
  EXPECT_EQ(stats.peak_by_kind[static_cast<int>(StateKind::kGrads)], 500u);
  EXPECT_EQ(stats.current_by_kind[static_cast<int>(StateKind::kGrads)], 0u);
}

TEST(MemoryPool, OverCapacityErrorNamesTierBytesAndKey) {
  MemoryPool pool(Tier::kDevice, 1024, "device.memory_limit");
  ASSERT_OK(pool.Reserve(StateKind::kParams, 1000, "unit 0"));
  EXPECT_THAT(
      pool.Reserve(StateKind::kOptimizer, 100, "unit 1 master"),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("device tier is full"), HasSubstr("unit 1 master asked 100 B"),
                     HasSubstr("only 24 B"), HasSubstr("device.memory_limit"))));
  EXPECT_EQ(pool.Stats().current_bytes, 1000u);  // the failed request took nothing
}

}  // namespace
}  // namespace strata
