// ResolvePlacement: the legality rules (each refused combination names its keys and the
// fix, all at once) and the capabilities the engine reads.
#include "runtime/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

Options Zero(int stage, StateTier optimizer, StateTier grads, StateTier params,
             float grad_clip = 1.0f, ParamUpdate update = ParamUpdate::kExact) {
  Options options;
  options.zero.stage = stage;
  options.zero.optimizer_tier = optimizer;
  options.zero.grad_tier = grads;
  options.zero.param_tier = params;
  options.zero.param_update = update;
  options.zero.nvme_dir = "/tmp";
  options.train.grad_clip = grad_clip;
  return options;
}

// The placement of `options` on `world` ranks. A failure to resolve fails the test with its
// status (and reads as a default Placement), where dereferencing the error would be undefined.
Placement Resolve(const Options& options, int world) {
  StatusOr<Placement> placement = ResolvePlacement(options, world);
  EXPECT_OK(placement);
  return placement.ok() ? *placement : Placement{};
}

constexpr StateTier kDevice = StateTier::kDevice;
constexpr StateTier kHost = StateTier::kHost;
constexpr StateTier kNvme = StateTier::kNvme;

TEST(Placement, DeviceOnlyHasNoCpuOptimizerCapabilities) {
  for (int stage = 0; stage <= 3; ++stage) {
    StatusOr<Placement> placement =
        ResolvePlacement(Zero(stage, kDevice, kDevice, kDevice, 0.0f), 1);
    ASSERT_OK(placement);
    EXPECT_FALSE(placement->cpu_optimizer());
    EXPECT_FALSE(placement->early_step) << "the device optimizer runs after backward";
    EXPECT_FALSE(placement->split_tied);
    EXPECT_EQ(placement->sharded_state(), stage >= 1);
    EXPECT_EQ(placement->per_unit_reduction(), stage >= 2);
    EXPECT_EQ(placement->sharded_params(), stage == 3);
  }
}

TEST(Placement, EarlyStepNeedsACpuOptimizerWithoutClippingOrDelay) {
  EXPECT_TRUE(Resolve(Zero(2, kHost, kHost, kDevice, 0.0f), 1).early_step);
  EXPECT_FALSE(Resolve(Zero(2, kHost, kHost, kDevice, 1.0f), 1).early_step);
  EXPECT_TRUE(Resolve(Zero(1, kNvme, kDevice, kDevice, 0.0f), 2).early_step);
  EXPECT_FALSE(Resolve(Zero(2, kHost, kHost, kDevice, 0.0f, ParamUpdate::kDelayed), 1).early_step);
}

TEST(Placement, SplitOnlyOnOneRankWithHostStateAndDeviceParams) {
  EXPECT_TRUE(Resolve(Zero(2, kHost, kHost, kDevice, 0.0f), 1).split_tied);
  EXPECT_TRUE(Resolve(Zero(3, kHost, kHost, kDevice, 0.0f), 1).split_tied);
  EXPECT_FALSE(Resolve(Zero(2, kHost, kHost, kDevice, 0.0f), 2).split_tied);
  EXPECT_FALSE(Resolve(Zero(1, kHost, kHost, kDevice, 0.0f), 1).split_tied)
      << "stage 1 reduces after the backward";
  EXPECT_FALSE(Resolve(Zero(2, kHost, kDevice, kDevice, 0.0f), 1).split_tied);
  EXPECT_FALSE(Resolve(Zero(3, kHost, kHost, kHost, 0.0f), 1).split_tied);
  EXPECT_FALSE(Resolve(Zero(2, kNvme, kHost, kDevice, 0.0f), 1).split_tied);
  EXPECT_FALSE(Resolve(Zero(2, kHost, kHost, kDevice, 1.0f), 1).split_tied);
}

TEST(Placement, NvmeHandOverWithEarlyStepsAndSumsOnNvme) {
  EXPECT_TRUE(Resolve(Zero(2, kNvme, kNvme, kDevice, 0.0f), 2).nvme_handover);
  EXPECT_FALSE(Resolve(Zero(2, kNvme, kNvme, kDevice, 1.0f), 2).nvme_handover);
  EXPECT_FALSE(Resolve(Zero(2, kNvme, kHost, kDevice, 0.0f), 2).nvme_handover);
}

TEST(Placement, ParamTierBelowStageThreeIsRefusedAndListedWithTheRest) {
  const std::vector<std::string> problems =
      PlacementProblems(Zero(1, kDevice, kHost, kNvme));
  ASSERT_EQ(problems.size(), 3u) << ::testing::PrintToString(problems);
  EXPECT_THAT(problems[0], HasSubstr("zero.grad_tier=host needs zero.optimizer_tier=host"));
  EXPECT_THAT(problems[1], HasSubstr("zero.param_tier=nvme needs zero.stage=3"));
  EXPECT_THAT(problems[2], HasSubstr("zero.param_tier=nvme needs zero.optimizer_tier=nvme"));
  EXPECT_THAT(ResolvePlacement(Zero(1, kDevice, kHost, kNvme), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("zero.param_tier=nvme needs zero.stage=3")));
}

TEST(Placement, EveryRuleNamesItsFix) {
  struct Case {
    Options options;
    const char* problem;
  };
  Options no_dir = Zero(2, kNvme, kDevice, kDevice);
  no_dir.zero.nvme_dir = "";
  const std::vector<Case> cases = {
      {Zero(0, kHost, kDevice, kDevice), "needs zero.stage >= 1"},
      {Zero(1, kNvme, kNvme, kDevice), "zero.grad_tier=nvme needs zero.optimizer_tier=nvme "
                                       "and zero.stage 2 or 3"},
      {Zero(2, kHost, kNvme, kDevice), "zero.grad_tier=nvme needs"},
      {Zero(3, kDevice, kDevice, kHost), "zero.param_tier=host needs zero.optimizer_tier=host"},
      {Zero(2, kHost, kDevice, kDevice, 1.0f, ParamUpdate::kDelayed),
       "zero.param_update=delayed needs"},
      {no_dir, "zero.nvme_dir is empty"},
  };
  for (const Case& c : cases) {
    const std::vector<std::string> problems = PlacementProblems(c.options);
    ASSERT_EQ(problems.size(), 1u) << c.problem << ": " << ::testing::PrintToString(problems);
    EXPECT_THAT(problems[0], HasSubstr(c.problem));
    EXPECT_THAT(problems[0], HasSubstr("set ")) << "names the fix";
  }
}

TEST(Placement, ParamsAreOnTheDeviceBelowStageThree) {
  StatusOr<Placement> placement = ResolvePlacement(Zero(2, kHost, kHost, kDevice), 1);
  ASSERT_OK(placement);
  EXPECT_EQ(placement->params, kDevice);
  placement = ResolvePlacement(Zero(3, kNvme, kHost, kNvme), 1);
  ASSERT_OK(placement);
  EXPECT_EQ(placement->params, kNvme);
  EXPECT_EQ(ResolvePlacement(Zero(4, kDevice, kDevice, kDevice), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
