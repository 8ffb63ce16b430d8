// See device_contract.h.
#include "core/testing/device_contract.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata::testing {

void ExpectSteadyStateMakesNoDriverCalls(Device& device) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device.CreateStream("contract"));
  const std::vector<size_t> sizes = {100, 5000, 1u << 20, (3u << 20) + 17, 7u << 20};
  auto round = [&] {
    for (Tier tier : {Tier::kDevice, Tier::kHost}) {
      std::vector<Buffer> live;
      for (size_t bytes : sizes) {
        ASSERT_OK_AND_ASSIGN(Buffer buffer,
                             device.Allocate(tier, StateKind::kWorkspace, bytes, "round"));
        ASSERT_OK(device.MemsetAsync(buffer.data(), 1, bytes, *stream));
        live.push_back(std::move(buffer));
      }
      ASSERT_OK(stream->Synchronize());
    }
  };
  round();
  round();  // the first round's blocks may still wait for their fences
  ASSERT_OK(stream->Synchronize());
  const uint64_t before = device.driver_calls();
  for (int i = 0; i < 3; ++i) round();
  EXPECT_EQ(device.driver_calls(), before) << "a steady-state round called the driver";
  EXPECT_GT(before, 0u) << "the first rounds must have allocated";
}

void ExpectNoReuseWhileAStreamIsBehind(Device& device) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device.CreateStream("behind"));
  for (Tier tier : {Tier::kDevice, Tier::kHost}) {
    SCOPED_TRACE(TierName(tier));
    // Settle the class: one block of it, freed while nothing runs.
    {
      ASSERT_OK_AND_ASSIGN(Buffer warm, device.Allocate(tier, StateKind::kWorkspace, 9000, "warm"));
    }
    ASSERT_OK(stream->Synchronize());
    auto release = std::make_shared<std::atomic<bool>>(false);
    stream->EnqueueHost([release] {
      while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return absl::OkStatus();
    });
    void* freed = nullptr;
    {
      ASSERT_OK_AND_ASSIGN(Buffer first, device.Allocate(tier, StateKind::kWorkspace, 9000, "a"));
      freed = first.data();
    }  // freed while the stream is held back
    ASSERT_OK_AND_ASSIGN(Buffer second, device.Allocate(tier, StateKind::kWorkspace, 9000, "b"));
    EXPECT_NE(second.data(), freed) << "handed out while a stream was behind its free";
    release->store(true);
    ASSERT_OK(stream->Synchronize());
    ASSERT_OK_AND_ASSIGN(Buffer third, device.Allocate(tier, StateKind::kWorkspace, 9000, "c"));
    EXPECT_EQ(third.data(), freed) << "not reused once every stream had passed";
  }
}

}  // namespace strata::testing
