// Tests of the tiers' capacities: defaults from the rank's share of usable RAM, explicit
// limits kept, and limits the machine cannot hold refused naming the keys.
#include "runtime/backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

TEST(TierCapacities, CpuDefaultsSplitTheRanksShare) {
  const HostMemory memory = HostMemoryFrom(24 * kGiB, 0);  // 21 GiB usable
  Options options;
  StatusOr<TierCapacities> one = ResolveTierCapacities(options, 1, memory);
  ASSERT_OK(one);
  EXPECT_EQ(one->device_bytes, 8 * kGiB);
  EXPECT_EQ(one->host_bytes, 13 * kGiB);
  StatusOr<TierCapacities> four = ResolveTierCapacities(options, 4, memory);
  ASSERT_OK(four);
  EXPECT_EQ(four->device_bytes + four->host_bytes, memory.usable_bytes / 4);
  EXPECT_EQ(four->device_bytes, memory.usable_bytes / 8);
}

TEST(TierCapacities, ExplicitLimitsAreKeptOrRefusedNamingTheKeys) {
  const HostMemory memory = HostMemoryFrom(24 * kGiB, 0);
  Options options;
  options.device.memory_limit = 2 * kGiB;
  options.tiers.host_memory_limit = 4 * kGiB;
  StatusOr<TierCapacities> kept = ResolveTierCapacities(options, 2, memory);
  ASSERT_OK(kept);
  EXPECT_EQ(kept->device_bytes, 2 * kGiB);
  EXPECT_EQ(kept->host_bytes, 4 * kGiB);
  options.tiers.host_memory_limit = 1024 * kGiB;
  EXPECT_THAT(ResolveTierCapacities(options, 1, memory),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("tiers.host_memory_limit = 1.00 TiB"),
                             HasSubstr("device.memory_limit = 2.00 GiB"),
                             HasSubstr("21.00 GiB usable"))));
  options.tiers.host_memory_limit = 0;
  options.device.memory_limit = 64 * kGiB;
  EXPECT_THAT(ResolveTierCapacities(options, 1, memory),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("device.memory_limit = 64.00 GiB")));
}

TEST(TierCapacities, CudaTakesTheWholeGpuAndRefusesTooMuchPinnedMemory) {
  const HostMemory memory = HostMemoryFrom(128 * kGiB, 0);  // 112 GiB usable
  Options options;
  options.device.backend = BackendKind::kCuda;
  StatusOr<TierCapacities> defaults = ResolveTierCapacities(options, 2, memory);
  ASSERT_OK(defaults);
  EXPECT_GT(defaults->device_bytes, 1ull << 50);  // clipped to the GPU by the device
  EXPECT_EQ(defaults->host_bytes, 56 * kGiB);
  options.tiers.host_memory_limit = 100 * kGiB;
  EXPECT_THAT(ResolveTierCapacities(options, 2, memory),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("tiers.host_memory_limit = 100.00 GiB"),
                             HasSubstr("56.00 GiB per rank for 2 rank(s)"))));
}

}  // namespace
}  // namespace strata
