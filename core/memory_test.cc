// Tests byte parsing and pool accounting: capacity errors name tier, kind and bytes.
#include "core/memory.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(ParseBytes, AcceptsUnits) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseBytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseBytes("1.5GB"), 1500000000ull);
  EXPECT_EQ(*ParseBytes("3 KiB"), 3072u);
}

TEST(ParseBytes, RejectsGarbageNamingIt) {
  auto bad = ParseBytes("lots");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'lots'"), std::string::npos);
  auto unit = ParseBytes("2XB");
  ASSERT_FALSE(unit.ok());
  EXPECT_NE(unit.status().message().find("unknown unit 'XB'"), std::string::npos);
}

TEST(MemoryPool, TracksCurrentAndPeakByKind) {
  MemoryPool pool(Tier::kDevice, 1000, "device.memory_limit");
  ASSERT_TRUE(pool.Reserve(StateKind::kParams, 300, "w").ok());
  ASSERT_TRUE(pool.Reserve(StateKind::kGrads, 500, "g").ok());
  pool.Release(StateKind::kGrads, 500);
  ASSERT_TRUE(pool.Reserve(StateKind::kActivations, 100, "a").ok());
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.current_bytes, 400u);
  EXPECT_EQ(stats.peak_bytes, 800u);
  EXPECT_EQ(stats.peak_by_kind[static_cast<int>(StateKind::kGrads)], 500u);
  EXPECT_EQ(stats.current_by_kind[static_cast<int>(StateKind::kGrads)], 0u);
}

TEST(MemoryPool, OverCapacityErrorNamesTierBytesAndKey) {
  MemoryPool pool(Tier::kDevice, 1024, "device.memory_limit");
  ASSERT_TRUE(pool.Reserve(StateKind::kParams, 1000, "unit 0").ok());
  Status status = pool.Reserve(StateKind::kOptimizer, 100, "unit 1 master");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  std::string message(status.message());
  EXPECT_NE(message.find("device tier is full"), std::string::npos) << message;
  EXPECT_NE(message.find("unit 1 master asked 100 B"), std::string::npos) << message;
  EXPECT_NE(message.find("only 24 B"), std::string::npos) << message;
  EXPECT_NE(message.find("device.memory_limit"), std::string::npos) << message;
  EXPECT_EQ(pool.Stats().current_bytes, 1000u);  // the failed request took nothing
}

}  // namespace
}  // namespace strata
