// The plumbing of `strata bench checkpoint` on the tiny model: the rounds run, the
// synchronous write is measured, and the two modes' last checkpoints (the same steps of the
// same data) are complete and hold byte-identical rank files: the background snapshot is
// the state after its step. The figures themselves are not asserted (a noisy machine).
#include "bench/bench_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/checkpoint.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(BenchCheckpoint, RunsEveryModeAndBothWriteTheSameCheckpoint) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                          "/bench-checkpoint";
  BenchArgs args;
  args.steps = 3;
  args.sets = {"model.preset=tiny", "train.seq_len=16", "train.micro_batch=2",
               "train.checkpoint_buffer_bytes=1MiB"};
  ASSERT_OK_AND_ASSIGN(const CheckpointBenchFigures figures,
                       MeasureCheckpointCost(args, dir, 2));
  EXPECT_EQ(figures.rounds, 2);
  EXPECT_EQ(figures.steps_per_round, 3);
  EXPECT_GT(figures.sync_write_ms, 0.0);
  EXPECT_GT(figures.none_round_ms, 0.0);
  EXPECT_GE(figures.background_stall_ms, 0.0);
  EXPECT_DOUBLE_EQ(figures.background_slowed_ms,
                   figures.background_extra_ms - figures.background_stall_ms);
  ASSERT_EQ(figures.last_checkpoints.size(), 2u);
  // Round 2's checkpoint step is step 6 (0-based 5): step-6 in both, the only one kept.
  EXPECT_EQ(figures.last_checkpoints[0], dir + "/sync/step-6");
  EXPECT_EQ(figures.last_checkpoints[1], dir + "/background/step-6");
  EXPECT_FALSE(std::filesystem::exists(dir + "/background/step-3"));
  for (const std::string& path : figures.last_checkpoints) {
    ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(path));
    EXPECT_OK(VerifyCheckpointFiles(opened, false));
  }
  const std::string sync = FileBytes(dir + "/sync/step-6/rank-00000.bin");
  EXPECT_EQ(sync.size(), figures.checkpoint_bytes);
  EXPECT_FALSE(sync.empty());
  EXPECT_TRUE(sync == FileBytes(dir + "/background/step-6/rank-00000.bin"));
}

}  // namespace
}  // namespace strata
