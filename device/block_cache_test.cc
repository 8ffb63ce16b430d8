// BlockCache with fake driver hooks: size classes; a freed block comes back for its class
// only once its fence passed; the budget sends blocks beyond it back to the driver; an
// out-of-memory allocation frees the cached blocks and tries again; every driver call is
// counted.
#include "device/block_cache.h"

#include <cstdlib>
#include <memory>
#include <set>

#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

struct FakeDriver {
  std::set<void*> live;
  uint64_t fail_above = ~0ull;  // allocations of more bytes than this fail while live
  uint64_t live_bytes = 0;
  bool fence_passed = true;

  BlockCache::Hooks Hooks() {
    BlockCache::Hooks hooks;
    hooks.allocate = [this](size_t bytes) -> StatusOr<RawBlock> {
      if (live_bytes + bytes > fail_above) return absl::ResourceExhaustedError("fake OOM");
      void* p = std::malloc(bytes);
      live.insert(p);
      live_bytes += bytes;
      return RawBlock{p, p, bytes};
    };
    hooks.free = [this](const RawBlock& block) {
      live.erase(block.base);
      live_bytes -= block.bytes;
      std::free(block.base);
    };
    hooks.fence = [this] {
      auto passed = std::make_shared<bool>(fence_passed);
      fences.push_back(passed);
      return [passed] { return *passed; };
    };
    return hooks;
  }
  std::vector<std::shared_ptr<bool>> fences;
};

TEST(BlockCache, SizeClasses) {
  EXPECT_EQ(BlockCache::ClassBytes(0), 4096u);
  EXPECT_EQ(BlockCache::ClassBytes(1), 4096u);
  EXPECT_EQ(BlockCache::ClassBytes(4097), 8192u);
  EXPECT_EQ(BlockCache::ClassBytes(1u << 20), 1u << 20);
  EXPECT_EQ(BlockCache::ClassBytes((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(BlockCache::ClassBytes((2u << 20) + 1), 4u << 20);
}

TEST(BlockCache, AFreedBlockComesBackOnlyAfterItsFence) {
  FakeDriver driver;
  driver.fence_passed = false;
  BlockCache cache(driver.Hooks(), 1u << 30);
  ASSERT_OK_AND_ASSIGN(RawBlock first, cache.Take(5000));
  EXPECT_EQ(first.bytes, 8192u);
  cache.Give(first);
  ASSERT_OK_AND_ASSIGN(RawBlock second, cache.Take(6000));  // same class, fence not passed
  EXPECT_NE(second.data, first.data) << "reused while a stream may still use it";
  *driver.fences[0] = true;
  ASSERT_OK_AND_ASSIGN(RawBlock third, cache.Take(8000));
  EXPECT_EQ(third.data, first.data) << "not reused after its fence passed";
  ASSERT_OK_AND_ASSIGN(RawBlock other, cache.Take(100));  // another class: a new block
  EXPECT_NE(other.data, first.data);
  EXPECT_EQ(cache.driver_calls(), 3u);  // first, second, other
  cache.Give(second);
  cache.Give(third);
  cache.Give(other);
  EXPECT_EQ(cache.cached_bytes(), 8192u * 2 + 4096u);
}

TEST(BlockCache, BeyondTheBudgetBlocksGoBackToTheDriver) {
  FakeDriver driver;
  BlockCache cache(driver.Hooks(), 8192);
  ASSERT_OK_AND_ASSIGN(RawBlock a, cache.Take(8192));
  ASSERT_OK_AND_ASSIGN(RawBlock b, cache.Take(8192));
  cache.Give(a);  // cached: 8192
  cache.Give(b);  // over the budget: freed
  EXPECT_EQ(driver.live.size(), 1u);
  EXPECT_EQ(cache.driver_calls(), 3u);
  EXPECT_EQ(cache.cached_bytes(), 8192u);
}

TEST(BlockCache, OutOfMemoryFreesTheCacheAndTriesAgain) {
  FakeDriver driver;
  BlockCache cache(driver.Hooks(), 1u << 30);
  ASSERT_OK_AND_ASSIGN(RawBlock a, cache.Take(4u << 20));
  cache.Give(a);
  driver.fail_above = 5u << 20;  // a's 4 MiB still held by the cache
  ASSERT_OK_AND_ASSIGN(RawBlock b, cache.Take(2u << 20));  // another class: needs a's room
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(driver.live.size(), 1u);
  driver.fail_above = 0;
  EXPECT_THAT(cache.Take(1u << 20).status(),
              ::strata::testing::StatusIs(absl::StatusCode::kResourceExhausted));
  cache.Give(b);
}

TEST(BlockCache, DestructionAndTrimFreeEveryCachedBlock) {
  FakeDriver driver;
  {
    BlockCache cache(driver.Hooks(), 1u << 30);
    ASSERT_OK_AND_ASSIGN(RawBlock a, cache.Take(100));
    ASSERT_OK_AND_ASSIGN(RawBlock b, cache.Take(1u << 21));
    cache.Give(a);
    cache.Give(b);
    cache.Trim();
    EXPECT_TRUE(driver.live.empty());
    ASSERT_OK_AND_ASSIGN(RawBlock c, cache.Take(100));
    cache.Give(c);
  }
  EXPECT_TRUE(driver.live.empty());
}

}  // namespace
}  // namespace strata
