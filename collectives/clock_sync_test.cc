// Tests the clock offsets the ranks measure: ranks as threads share one clock, so each
// rank's clock is given a known skew; the measured offsets must recover it (within the
// time the threads take to leave a barrier), the same on every rank.
#include "collectives/clock_sync.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "collectives/local_communicator.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(ClockSync, RecoversEachRanksSkew) {
  constexpr int kWorld = 3;
  const int64_t skew[kWorld] = {0, 7'000'000'000, -250'000'000};  // +7 s, -0.25 s
  ASSERT_OK_AND_ASSIGN(auto group, CreateLocalGroup(kWorld, LocalGroupOptions{}));
  std::vector<StatusOr<std::vector<int64_t>>> got(kWorld, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      got[r] = MeasureClockOffsets(*group[r], [&] { return SteadyNs() + skew[r]; });
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_OK(got[r]);
    EXPECT_EQ(*got[r], *got[0]) << "rank " << r << " measured other offsets than rank 0";
  }
  for (int r = 0; r < kWorld; ++r) {
    // Threads leave a barrier within a few ms even on a loaded 2-core machine (the median
    // of 7 rounds drops the outliers).
    EXPECT_NEAR((*got[0])[r] / 1e6, skew[r] / 1e6, 20.0) << "rank " << r << " (ms)";
  }
}

TEST(ClockSync, OneRankAndBadRounds) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateLocalGroup(1, LocalGroupOptions{}));
  ASSERT_OK_AND_ASSIGN(auto offsets, MeasureClockOffsets(*group[0], SteadyNs));
  EXPECT_EQ(offsets, std::vector<int64_t>{0});
  EXPECT_EQ(MeasureClockOffsets(*group[0], SteadyNs, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
