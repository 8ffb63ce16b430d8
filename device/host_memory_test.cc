// Tests of the usable host memory arithmetic and the probe on this machine.
#include "device/host_memory.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

TEST(HostMemory, ReserveIsTwoGibOrAnEighthAndTheCgroupLimitWins) {
  HostMemory big = HostMemoryFrom(64 * kGiB, 0);
  EXPECT_EQ(big.reserve_bytes, 8 * kGiB);
  EXPECT_EQ(big.usable_bytes, 56 * kGiB);
  HostMemory small = HostMemoryFrom(8 * kGiB, 0);
  EXPECT_EQ(small.reserve_bytes, 2 * kGiB);
  EXPECT_EQ(small.usable_bytes, 6 * kGiB);
  HostMemory limited = HostMemoryFrom(64 * kGiB, 16 * kGiB);
  EXPECT_EQ(limited.usable_bytes, 14 * kGiB);
  HostMemory tiny = HostMemoryFrom(2 * kGiB, 0);  // never more than half reserved
  EXPECT_EQ(tiny.usable_bytes, 1 * kGiB);
  EXPECT_EQ(limited.Describe(),
            "14.00 GiB usable (physical 64.00 GiB, cgroup limit 16.00 GiB, reserve 2.00 GiB)");
}

TEST(HostMemory, ProbeSeesThisMachine) {
  HostMemory memory = ProbeHostMemory();
  EXPECT_GT(memory.physical_bytes, 256ull << 20);
  EXPECT_LT(memory.usable_bytes, memory.physical_bytes);
  EXPECT_GT(memory.usable_bytes, 0u);
}

}  // namespace
}  // namespace strata
