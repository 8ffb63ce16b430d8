// StartWatch: a collective that waits to start past the timeout fails once, naming itself
// and its stream; one that starts in time, or waits behind a running collective, does not.
#include "collectives/start_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

struct Failures {
  std::mutex mutex;
  std::vector<std::pair<Status, uint64_t>> seen;
  auto Callback() {
    return [this](const Status& status, uint64_t sequence) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.emplace_back(status, sequence);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return seen.size();
  }
};

CollectiveCall Call(uint64_t sequence) {
  CollectiveCall call;
  call.op = CollectiveOp::kAllReduce;
  call.sequence = sequence;
  call.count = 16;
  return call;
}

TEST(StartWatch, ACallThatNeverStartsFailsOnceNamingItselfAndItsStream) {
  Failures failures;
  StartWatch watch("local rank 0 of 1", 0.1, failures.Callback());
  watch.Issued(Call(0), "comm");
  watch.Issued(Call(1), "comm");
  std::this_thread::sleep_for(milliseconds(400));
  ASSERT_EQ(failures.count(), 1u);
  EXPECT_EQ(failures.seen[0].second, 0u);
  EXPECT_THAT(failures.seen[0].first,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("local rank 0 of 1: all_reduce #0 (16 x fp32)"),
                             HasSubstr("stream 'comm' did not start within 0.1 s"))));
}

TEST(StartWatch, CallsThatStartInTimeOrWaitBehindARunningCollectiveDoNotFail) {
  Failures failures;
  StartWatch watch("rank", 0.15, failures.Callback());
  for (uint64_t i = 0; i < 3; ++i) {
    watch.Issued(Call(i), "comm");
  }
  // #0 starts in time and runs for three timeouts: #1 waits behind it without failing.
  std::this_thread::sleep_for(milliseconds(50));
  watch.Started(0);
  std::this_thread::sleep_for(milliseconds(450));
  watch.Finished();
  // #1's clock restarted at #0's end.
  std::this_thread::sleep_for(milliseconds(50));
  watch.Started(2);  // #1 and #2 both started (in order)
  watch.Finished();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(failures.count(), 0u);
  // A later call left pending still fails.
  watch.Issued(Call(3), "comm");
  std::this_thread::sleep_for(milliseconds(400));
  ASSERT_EQ(failures.count(), 1u);
  EXPECT_EQ(failures.seen[0].second, 3u);
}

}  // namespace
}  // namespace strata
