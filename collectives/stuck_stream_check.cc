#include "collectives/stuck_stream_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "core/testing/status_matchers.h"

namespace strata {

void ExpectCollectiveBehindStuckWorkFails(Device& device, Communicator& communicator,
                                          Stream& stream, double timeout_s) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  struct Latch {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false;
  };
  auto latch = std::make_shared<Latch>();
  ASSERT_OK_AND_ASSIGN(Buffer data, device.Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                    16 * sizeof(float), "stuck-stream test"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> blocker, device.CreateStream("blocker"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> blocked, device.CreateEvent());
  // Work that "never finishes" (until the test opens the latch), and the collective's stream
  // waiting for it.
  blocker->EnqueueHost([latch] {
    std::unique_lock<std::mutex> lock(latch->mutex);
    latch->cv.wait_for(lock, std::chrono::seconds(60), [&] { return latch->open; });
    return absl::OkStatus();
  });
  ASSERT_OK(device.Record(*blocked, *blocker));
  ASSERT_OK(device.Wait(stream, *blocked));
  ASSERT_OK(communicator.AllReduce(data.data(), 16, DType::kF32, stream));
  std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s + 1.0));
  {
    std::lock_guard<std::mutex> lock(latch->mutex);
    latch->open = true;
  }
  latch->cv.notify_all();
  ASSERT_OK(blocker->Synchronize());
  // Without the start watch the collective would now run and succeed.
  EXPECT_THAT(stream.Synchronize(),
              testing::StatusIs(
                  absl::StatusCode::kDeadlineExceeded,
                  AllOf(HasSubstr("all_reduce #0 (16 x fp32)"), HasSubstr("did not start within"),
                        HasSubstr(absl::StrCat("stream '", stream.name(), "'")))));
}

}  // namespace strata
