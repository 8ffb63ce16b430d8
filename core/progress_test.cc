// Tests of progress reporting on a fake clock: quiet for short work; periodic lines with
// percent, rate and time left elsewhere; a redrawn bar on a terminal; the final line.
#include "core/progress.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::HasSubstr;
using Clock = ProgressOptions::Clock;

struct Rig {
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  std::vector<std::string> out;
  ProgressOptions Options(bool terminal) {
    ProgressOptions options;
    options.terminal = terminal ? 1 : 0;
    options.sink = [this](const std::string& text) { out.push_back(text); };
    options.now = [this] { return now; };
    return options;
  }
  void Wait(int ms) { now += std::chrono::milliseconds(ms); }
};

TEST(Progress, ShortWorkPrintsNothing) {
  Rig rig;
  {
    Progress progress("checkpoint step-2", 1000, rig.Options(false));
    rig.Wait(500);
    progress.Advance(1000);
    rig.Wait(500);
  }
  EXPECT_TRUE(rig.out.empty());
}

TEST(Progress, LinesEveryIntervalWithPercentRateAndTimeLeft) {
  Rig rig;
  Progress progress("resume", 100'000'000, rig.Options(false));
  rig.Wait(2500);
  progress.Advance(25'000'000);  // 25 MB in 2.5 s: 10 MB/s, 7.5 s left
  ASSERT_EQ(rig.out.size(), 1u);
  EXPECT_EQ(rig.out[0], "resume: 25% 23.84 MiB of 95.37 MiB, 10 MB/s, 8 s left\n");
  rig.Wait(1000);
  progress.Advance(10'000'000);  // within the 10 s interval: nothing
  EXPECT_EQ(rig.out.size(), 1u);
  rig.Wait(10000);
  progress.Advance(65'000'000);
  ASSERT_EQ(rig.out.size(), 2u);
  EXPECT_THAT(rig.out[1], HasSubstr("100% 95.37 MiB of 95.37 MiB"));
  progress.Finish();
  ASSERT_EQ(rig.out.size(), 3u);
  EXPECT_EQ(rig.out[2], "resume: done, 95.37 MiB in 13.5 s\n");
  progress.Finish();  // once
  EXPECT_EQ(rig.out.size(), 3u);
}

TEST(Progress, ATerminalGetsOneRedrawnBar) {
  Rig rig;
  Progress progress("swap files", 1000, rig.Options(true));
  rig.Wait(2000);
  progress.Advance(500);
  rig.Wait(50);
  progress.Advance(100);  // within 100 ms: no redraw
  rig.Wait(100);
  progress.Advance(100);
  progress.Finish();
  ASSERT_EQ(rig.out.size(), 3u);
  EXPECT_EQ(rig.out[0].substr(0, 1), "\r");
  EXPECT_THAT(rig.out[0], HasSubstr("[##########..........] 50%"));
  EXPECT_THAT(rig.out[1], HasSubstr("[##############......] 70%"));
  EXPECT_EQ(rig.out[2].back(), '\n');
}

}  // namespace
}  // namespace strata
