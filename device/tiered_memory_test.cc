// TieredMemory, the memory code both devices share: each tier accounted in its own pool, a
// full pool refused before the driver is asked, a driver failure said of what asked with
// the pool's bytes given back, blocks reused without driver calls, and the observer told
// of every buffer.
#include "device/tiered_memory.h"

#include <cstdlib>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

struct FakeDriver {
  int allocations = 0, frees = 0;
  bool fail = false;
  TierDriver Make(uint64_t capacity, const char* key) {
    TierDriver driver;
    driver.allocate = [this](size_t bytes) -> StatusOr<RawBlock> {
      if (fail) return absl::ResourceExhaustedError("the fake driver is out of memory");
      ++allocations;
      void* data = std::aligned_alloc(4096, bytes);
      return RawBlock{data, data, bytes};
    };
    driver.free = [this](const RawBlock& block) {
      ++frees;
      std::free(block.base);
    };
    driver.capacity_bytes = capacity;
    driver.limit_key = key;
    driver.max_cached_bytes = 1 << 20;
    return driver;
  }
};

TEST(TieredMemory, AccountsEachTierAndReusesBlocks) {
  FakeDriver device_driver, host_driver;
  std::map<void*, Tier> live;
  TieredMemory::Options options;
  options.device = device_driver.Make(1 << 20, "device.memory_limit");
  options.host = host_driver.Make(2 << 20, "tiers.host_memory_limit");
  options.on_allocated = [&](void* data, size_t, Tier tier) { live[data] = tier; };
  options.on_freed = [&](void* data) { live.erase(data); };
  TieredMemory memory(options);
  {
    ASSERT_OK_AND_ASSIGN(Buffer a, memory.Allocate(Tier::kDevice, StateKind::kParams, 5000, "a"));
    ASSERT_OK_AND_ASSIGN(Buffer b, memory.Allocate(Tier::kHost, StateKind::kGrads, 100, "b"));
    EXPECT_EQ(a.tier(), Tier::kDevice);
    EXPECT_EQ(memory.pool(Tier::kDevice).Stats().current_by_kind[0], 5000u);
    EXPECT_EQ(memory.pool(Tier::kHost).Stats().current_by_kind[1], 100u);
    EXPECT_EQ(live.size(), 2u);
    EXPECT_EQ(live[a.data()], Tier::kDevice);
    EXPECT_EQ(live[b.data()], Tier::kHost);
  }
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(memory.pool(Tier::kDevice).Stats().current_bytes, 0u);
  EXPECT_EQ(memory.driver_calls(), 2u);  // one allocation per tier, both blocks cached
  {  // the same size class again: from the cache
    ASSERT_OK_AND_ASSIGN(Buffer a, memory.Allocate(Tier::kDevice, StateKind::kParams, 6000, "a"));
  }
  EXPECT_EQ(memory.driver_calls(), 2u);
  EXPECT_EQ(device_driver.allocations, 1);
}

TEST(TieredMemory, FullPoolAndDriverFailuresAreSaidAndLeaveNothing) {
  FakeDriver device_driver, host_driver;
  TieredMemory::Options options;
  options.device = device_driver.Make(8192, "device.memory_limit");
  options.host = host_driver.Make(8192, "tiers.host_memory_limit");
  TieredMemory memory(options);
  EXPECT_THAT(memory.Allocate(Tier::kDevice, StateKind::kOptimizer, 10000, "unit 1 master"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("unit 1 master"), HasSubstr("device.memory_limit"))));
  EXPECT_EQ(device_driver.allocations, 0);  // refused before the driver was asked
  host_driver.fail = true;
  EXPECT_THAT(memory.Allocate(Tier::kHost, StateKind::kGrads, 4096, "unit 2 grads"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("for unit 2 grads on the host tier"),
                             HasSubstr("the fake driver is out of memory"))));
  EXPECT_EQ(memory.pool(Tier::kHost).Stats().current_bytes, 0u);  // given back
}

}  // namespace
}  // namespace strata
