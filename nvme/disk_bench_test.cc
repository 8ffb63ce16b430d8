// Tests RunDiskBench end to end on a small file (fast): every figure is produced, ratios
// and goal verdicts are consistent with the figures, a missing fio is reported rather
// than failing, and bad options are rejected listing every problem. The real measurement
// (1 GiB and more) is nvme_bench_main's job.
#include "nvme/disk_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace strata::nvme {
namespace {

std::string TestDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

DiskBenchOptions SmallOptions() {
  DiskBenchOptions options;
  options.dir = TestDir();
  options.file_bytes = 8ull << 20;
  options.queue_depths = {1, 4};
  options.passes = 1;
  return options;
}

TEST(DiskBench, MeasuresEngineFioAndPlainLoopOnASmallFile) {
  StatusOr<DiskBenchResult> result = RunDiskBench(SmallOptions());
  if (!result.ok() && result.status().code() == absl::StatusCode::kInvalidArgument &&
      Contains(result.status().message(), "O_DIRECT")) {
    GTEST_SKIP() << result.status();
  }
  ASSERT_TRUE(result.ok()) << result.status();
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
    EXPECT_GT(result->read_vs_fio, 0);
    EXPECT_DOUBLE_EQ(result->read_vs_fio,
                     result->median_engine_read_mb_per_s / result->median_fio_read_mb_per_s);
    EXPECT_GE(result->best_fio_read_mb_per_s, result->median_fio_read_mb_per_s);
    EXPECT_EQ(result->goal_vs_fio_met, result->read_vs_fio >= kGoalReadVsFio);
    EXPECT_TRUE(Contains(result->fio_version, "fio")) << result->fio_version;
  } else {
    EXPECT_FALSE(result->fio_note.empty());
  }
  const std::string text = FormatDiskBench(*result);
  EXPECT_TRUE(Contains(text, "plain pread loop")) << text;
  EXPECT_TRUE(Contains(text, "goal:")) << text;
  EXPECT_NE(::access(result->file.c_str(), F_OK), 0) << "the test file is removed";
}

TEST(DiskBench, MissingFioIsReportedNotFatal) {
  DiskBenchOptions options = SmallOptions();
  options.queue_depths = {2};
  options.fio_path = "strata-no-such-fio";
  options.measure_small_page_buffers = false;
  StatusOr<DiskBenchResult> result = RunDiskBench(options);
  if (!result.ok() && Contains(result.status().message(), "O_DIRECT")) {
    GTEST_SKIP() << result.status();
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->fio_available);
  EXPECT_TRUE(Contains(result->fio_note, "fio not found")) << result->fio_note;
  EXPECT_FALSE(result->goal_vs_fio_met);
  EXPECT_EQ(result->depths[0].fio_read_mb_per_s, 0);
  EXPECT_TRUE(Contains(FormatDiskBench(*result), "not measured")) << FormatDiskBench(*result);
}

TEST(DiskBench, RejectsBadOptionsListingEveryProblem) {
  DiskBenchOptions options;
  options.file_bytes = 3 << 20;
  options.request_bytes = 2 << 20;
  options.queue_depths = {0};
  StatusOr<DiskBenchResult> result = RunDiskBench(options);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(result.status().message());
  EXPECT_TRUE(Contains(message, "dir: required")) << message;
  EXPECT_TRUE(Contains(message, "file size")) << message;
  EXPECT_TRUE(Contains(message, "queue depth 0")) << message;
}

}  // namespace
}  // namespace strata::nvme
