// Tests byte parsing and pool accounting: capacity errors name tier, kind and bytes.
#include "core/memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

TEST(ParseBytes, AcceptsUnits) {
  EXPECT_THAT(ParseBytes("4096"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseBytes("2GiB"), IsOkAndHolds(2ull << 30));
  EXPECT_THAT(ParseBytes("512MiB"), IsOkAndHolds(512ull << 20));
  EXPECT_THAT(ParseBytes("1.5GB"), IsOkAndHolds(1500000000ull));
  EXPECT_THAT(ParseBytes("3 KiB"), IsOkAndHolds(3072u));
}

TEST(ParseBytes, OverflowIsAnErrorNeverASaturatedValue) {
  EXPECT_THAT(ParseBytes("18446744073709551615"), IsOkAndHolds(UINT64_MAX));
  EXPECT_THAT(ParseBytes("9007199254740993"), IsOkAndHolds(9007199254740993ull));  // 2^53 + 1
  for (const char* text : {"18446744073709551616", "99999999999999999999999", "16777216TiB",
                           "20000000000TB", "17179869184.5GiB"}) {
    EXPECT_THAT(ParseBytes(text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large a size")))
        << text;
  }
  EXPECT_THAT(ParseBytes("16777215TiB"), IsOkAndHolds(16777215ull << 40));
}

TEST(ParseBytes, RejectsGarbageNamingIt) {
  EXPECT_THAT(ParseBytes("lots"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'lots'")));
  EXPECT_THAT(ParseBytes("2XB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown unit 'XB'")));
}

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
