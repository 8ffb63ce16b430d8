// Tests RunDiskBench end to end on a small file (fast): every figure is produced, ratios
// and goal verdicts are consistent with the figures, a missing fio is reported rather
// than failing, and bad options are rejected listing every problem. The real measurement
// (1 GiB and more) is nvme_bench_main's job.
#include "nvme/disk_bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "core/testing/status_matchers.h"

namespace strata::nvme {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TestDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

DiskBenchOptions SmallOptions() {
  DiskBenchOptions options;
  options.dir = TestDir();
  options.file_bytes = 8ull << 20;
  options.queue_depths = {1, 4};
  options.passes = 1;
  options.reserve_huge_pages = false;  // a test changes no system setting
  return options;
}

TEST(DiskBench, MeasuresEngineFioAndPlainLoopOnASmallFile) {
  StatusOr<DiskBenchResult> result = RunDiskBench(SmallOptions());
  if (!result.ok() && result.status().code() == absl::StatusCode::kInvalidArgument &&
      absl::StrContains(result.status().message(), "O_DIRECT")) {
    GTEST_SKIP() << result.status();
  }
  ASSERT_OK(result);
  ASSERT_EQ(result->depths.size(), 2u);
  for (const DepthFigures& figures : result->depths) {
    EXPECT_GT(figures.engine_read_mb_per_s, 0);
    EXPECT_GT(figures.engine_write_mb_per_s, 0);
  }
  EXPECT_GT(result->plain_loop_read_mb_per_s, 0);
  EXPECT_GT(result->engine_read_small_pages_mb_per_s, 0);
  EXPECT_EQ(result->compared_depth, 1u);
  EXPECT_DOUBLE_EQ(result->read_vs_plain_loop,
                   result->engine_read_compared_mb_per_s / result->plain_loop_read_mb_per_s);
  EXPECT_EQ(result->goal_vs_plain_loop_met, result->read_vs_plain_loop >= kGoalReadVsPlainLoop);
  if (result->fio_available) {
    EXPECT_GT(result->depths[0].fio_read_mb_per_s, 0);
    EXPECT_GT(result->depths[1].fio_write_mb_per_s, 0);
    EXPECT_GT(result->best_read_vs_fio, 0);
    EXPECT_DOUBLE_EQ(result->best_read_vs_fio,
                     result->best_engine_read_mb_per_s / result->best_fio_read_mb_per_s);
    EXPECT_DOUBLE_EQ(result->best_write_vs_fio,
                     result->best_engine_write_mb_per_s / result->best_fio_write_mb_per_s);
    EXPECT_GE(result->best_fio_read_mb_per_s, result->depths[0].fio_read_mb_per_s);
    EXPECT_EQ(result->goal_vs_fio_best_met, result->best_read_vs_fio >= kGoalVsFioBest &&
                                                result->best_write_vs_fio >= kGoalVsFioBest);
    // Depth 4 is the one depth in [4, 32] measured here.
    EXPECT_DOUBLE_EQ(result->worst_depth_ratio,
                     std::min(result->depths[1].read_vs_fio, result->depths[1].write_vs_fio));
    EXPECT_EQ(result->goal_vs_fio_depths_met, result->worst_depth_ratio >= kGoalVsFioPerDepth);
    EXPECT_THAT(result->fio_version, HasSubstr("fio"));
    EXPECT_FALSE(result->fio_buffers.empty());
    EXPECT_FALSE(result->huge_page_note.empty());
  } else {
    EXPECT_FALSE(result->fio_note.empty());
  }
  const std::string text = FormatDiskBench(*result);
  EXPECT_THAT(text, AllOf(HasSubstr("plain pread loop"), HasSubstr("goal:")));
  EXPECT_NE(::access(result->file.c_str(), F_OK), 0) << "the test file is removed";
}

TEST(DiskBench, MissingFioIsReportedNotFatal) {
  DiskBenchOptions options = SmallOptions();
  options.queue_depths = {2};
  options.fio_path = "strata-no-such-fio";
  options.measure_small_page_buffers = false;
  StatusOr<DiskBenchResult> result = RunDiskBench(options);
  if (!result.ok() && absl::StrContains(result.status().message(), "O_DIRECT")) {
    GTEST_SKIP() << result.status();
  }
  ASSERT_OK(result);
  EXPECT_FALSE(result->fio_available);
  EXPECT_THAT(result->fio_note, HasSubstr("fio not found"));
  EXPECT_FALSE(result->goal_vs_fio_best_met);
  EXPECT_FALSE(result->goal_vs_fio_depths_met);
  ASSERT_EQ(result->depths.size(), 1u);
  EXPECT_EQ(result->depths[0].fio_read_mb_per_s, 0);
  EXPECT_THAT(FormatDiskBench(*result), HasSubstr("not measured"));
}

TEST(DiskBench, RejectsBadOptionsListingEveryProblem) {
  DiskBenchOptions options;
  options.file_bytes = 3 << 20;
  options.request_bytes = 2 << 20;
  options.queue_depths = {0};
  EXPECT_THAT(RunDiskBench(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dir: required"), HasSubstr("file size"),
                             HasSubstr("queue depth 0"))));
}

}  // namespace
}  // namespace strata::nvme
