// `strata bench infinity`'s 8-bit states comparison (CompareOptimizerStates) on the tiny
// preset: alternating pairs of real runs on a swap directory, the bytes per step (the same in
// every pair: counted, not timed) below fp32's and consistent with the layout, and the goals'
// wording for every outcome. Timings are not asserted (a noisy machine).
#include "bench/bench_infinity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string SwapDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/bench_infinity_swap";
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(BenchInfinity, StatesComparisonOnTheTinyModel) {
  BenchArgs args;
  args.steps = 2;
  const std::vector<std::string> base = {
      "model.preset=tiny",   "train.micro_batch=1", "train.seq_len=16",
      "train.grad_clip=0",   "train.eval_every=0",  "train.steps=1000",
      "zero.world=1",        "device.threads=1",    "nvme.chunk_bytes=1MiB",
      "zero.nvme_dir=" + SwapDir()};
  ASSERT_OK_AND_ASSIGN(const StatesComparison c, CompareOptimizerStates(args, base, 2));
  ASSERT_EQ(c.bytes_ratios.size(), 2u);
  ASSERT_EQ(c.time_ratios.size(), 2u);
  EXPECT_EQ(c.bytes_ratios[0], c.bytes_ratios[1]);
  EXPECT_GT(c.fp32_bytes, 0);
  EXPECT_LT(c.int8_bytes, c.fp32_bytes);
  EXPECT_EQ(c.bytes_ratio, c.int8_bytes / c.fp32_bytes);
  // The tiny model keeps its token embedding (16384 of its elements) in fp32 moments.
  EXPECT_GT(c.fp32_moment_share, 0.1);
  EXPECT_LT(c.fp32_moment_share, 0.9);
  EXPECT_GT(c.layout_bytes_ratio, 0.5);
  EXPECT_LT(c.layout_bytes_ratio, 1.0);
  // Extents are padded to 4 KiB, which costs the small 8-bit ones more: at or above the
  // layout's ratio, not far with one chunk per unit (chunks of 16 KiB would pad each
  // moment's 4096 codes + 8 bytes of absmaxes to 8 KiB).
  EXPECT_GE(c.bytes_ratio, c.layout_bytes_ratio);
  EXPECT_LT(c.bytes_ratio, c.layout_bytes_ratio + 0.1);
  for (double ratio : c.time_ratios) EXPECT_GT(ratio, 0);
  EXPECT_THAT(DescribeStatesComparison(c), HasSubstr("bytes per step int8 / fp32"));
}

TEST(BenchInfinity, GoalsSayWhyTheyAreMissed) {
  StatesComparison c;
  c.bytes_ratios = {0.66};
  c.time_ratios = {0.7};
  c.bytes_ratio = 0.66;
  c.time_ratio = 0.7;
  c.fp32_moment_share = 0.31;
  c.layout_bytes_ratio = 0.655;
  c.fp32_disk_share = 0.9;
  c.int8_disk_share = 0.9;
  const std::string missed = DescribeStatesComparison(c);
  EXPECT_THAT(missed, HasSubstr("goal <= 0.55: NOT MET: the elements with fp32 moments"));
  EXPECT_THAT(missed, HasSubstr("31.0% of the state elements keep fp32 moments"));
  EXPECT_THAT(missed, HasSubstr("goal <= 0.65: NOT MET: a disk-bound step's time follows its "
                                "bytes, 0.660 here, above the goal itself"));
  // An int8 step that no longer waits on the disk: its CPU Adam is named.
  c.int8_disk_share = 0.4;
  c.int8_adam_ms = 900;
  c.fp32_adam_ms = 300;
  EXPECT_THAT(DescribeStatesComparison(c),
              HasSubstr("the int8 step is not disk-bound (disk busy 40%): its CPU Adam (900 ms "
                        "against fp32's 300)"));
  c.fp32_disk_share = 0.5;
  EXPECT_THAT(DescribeStatesComparison(c), HasSubstr("NOT JUDGED"));
  c.bytes_ratio = 0.52;
  c.time_ratio = 0.6;
  c.fp32_disk_share = 0.95;
  const std::string met = DescribeStatesComparison(c);
  EXPECT_THAT(met, HasSubstr("goal <= 0.55: MET"));
  EXPECT_THAT(met, HasSubstr("goal <= 0.65: MET"));
  EXPECT_THAT(met, Not(HasSubstr("NOT")));
}

}  // namespace
}  // namespace strata
