// ZeRO-Offload against the same runs with everything on the device (CPU backend, ranks as
// threads). On this backend the host optimizer runs the same SIMD CPU Adam and the same
// CPU sums as the device path, in the same order, so losses must be bit-identical; across
// world sizes the tolerance of the stages test applies (relative 2e-5, fp32, 20 steps).
// Also: where the bytes go (optimizer and grad shards to the host pool, stage-3 params too),
// a model that does not fit device.memory_limit on the device trains with offload, and the
// host tier's own limit is a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "core/testing/status_matchers.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

Options Make(int world, int stage, std::vector<std::string> extra, int steps = 20) {
  return PlacementRunOptions(world, stage, extra, steps);
}

const std::vector<std::vector<std::string>> kHostPlacements = {
    {"zero.optimizer_tier=host", "zero.grad_tier=host"},
    {"zero.optimizer_tier=host", "zero.grad_tier=device"},
};

TEST(Offload, HostOptimizerMatchesDeviceOptimizer) {
  for (int world : {1, 2}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (const char* clip : {"train.grad_clip=1", "train.grad_clip=0"}) {
        const PlacementRun device = TrainAllRanks(Make(world, stage, {clip}));
        ASSERT_OK(device.status);
        ASSERT_EQ(device.losses.size(), 20u);
        EXPECT_LT(device.losses.back(), device.losses.front() - 0.3) << "it should learn";
        auto placements = kHostPlacements;
        if (stage == 3) {
          placements.push_back(
              {"zero.optimizer_tier=host", "zero.grad_tier=host", "zero.param_tier=host"});
        }
        for (auto placement : placements) {
          const std::string what = absl::StrCat("world ", world, " stage ", stage, " ", clip,
                                                " ", absl::StrJoin(placement, " "));
          placement.push_back(clip);
          const PlacementRun host = TrainAllRanks(Make(world, stage, placement));
          ASSERT_OK(host.status) << what;
          EXPECT_EQ(host.losses, device.losses) << what;
          for (const StepResult& step : host.steps) {
            EXPECT_GT(step.optimizer_ms, 0.0) << what;
            EXPECT_GE(step.optimizer_exposed_ms, 0.0) << what;
          }
        }
      }
    }
  }
}

// LLaMA, tied (the embedding is also the head, so its gradient is split between the first
// and last backward stage) and untied, pairwise over stages and worlds: the host optimizer
// gives the device's losses bit for bit.
TEST(Offload, LlamaHostOptimizerMatchesDeviceOptimizer) {
  struct Case {
    int world, stage;
    bool tied;
    std::vector<std::string> placement;
  };
  const std::vector<Case> cases = {
      {2, 2, true, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
      {1, 1, false, {"zero.optimizer_tier=host", "zero.grad_tier=device"}},
      {2, 3, false,
       {"zero.optimizer_tier=host", "zero.grad_tier=host", "zero.param_tier=host"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> model = TinyLlamaSets();
    if (c.tied) model.push_back("model.tie_embeddings=true");
    const std::string what = absl::StrCat("world ", c.world, " stage ", c.stage,
                                          c.tied ? " tied " : " untied ",
                                          absl::StrJoin(c.placement, " "));
    const PlacementRun device = TrainAllRanks(Make(c.world, c.stage, model, 10));
    ASSERT_OK(device.status) << what;
    EXPECT_LT(device.losses.back(), device.losses.front() - 0.3) << what << ": it should learn";
    std::vector<std::string> sets = model;
    sets.insert(sets.end(), c.placement.begin(), c.placement.end());
    const PlacementRun host = TrainAllRanks(Make(c.world, c.stage, sets, 10));
    ASSERT_OK(host.status) << what;
    EXPECT_EQ(host.losses, device.losses) << what;
  }
}

// One rank, no clipping (one or two micro-batches, fp32 or bf16): the tied embedding's
// sub-step is split
// (the elements its lookup's backward leaves alone are landed and stepped right after the
// LM head's backward, the token and position rows at the end) and still gives the device
// placement's losses exactly (its norm, summed in two parts, within fp32 rounding; it
// does not steer the step without clipping); with clipping nothing is split.
TEST(Offload, SplitTiedEmbeddingMatchesTheDevice) {
  const std::vector<std::vector<std::string>> variants = {
      {"train.grad_accum=1"}, {"train.grad_accum=2"}, {"train.grad_accum=1", "train.dtype=bf16"}};
  for (const auto& variant : variants) {
    for (int stage : {2, 3}) {
      for (const char* clip : {"train.grad_clip=0", "train.grad_clip=1"}) {
        std::vector<std::string> base = variant;
        base.push_back(clip);
        const PlacementRun device = TrainAllRanks(Make(1, stage, base, 8));
        ASSERT_OK(device.status);
        std::vector<std::string> host = base;
        host.insert(host.end(), {"zero.optimizer_tier=host", "zero.grad_tier=host"});
        const PlacementRun offload = TrainAllRanks(Make(1, stage, host, 8));
        ASSERT_OK(offload.status);
        const std::string what = absl::StrCat(absl::StrJoin(variant, " "), " stage ", stage, " ",
                                              clip);
        EXPECT_EQ(offload.losses, device.losses) << what;
        const bool split = std::string(clip) == "train.grad_clip=0";
        ASSERT_EQ(offload.steps.size(), device.steps.size());
        for (size_t i = 0; i < offload.steps.size(); ++i) {
          EXPECT_EQ(offload.steps[i].split_units, split ? 1 : 0) << what;
          // The split unit's norm is summed in two parts: the same within fp32 rounding.
          const double norm = device.steps[i].grad_norm;
          EXPECT_NEAR(offload.steps[i].grad_norm, norm, 1e-6 * norm) << what << " step " << i;
        }
      }
    }
  }
}

// bf16 compute: the host gradient sums go through the landing buffer (converted, then
// summed); still the device placement's losses, every stage, both worlds.
TEST(Offload, HostOptimizerMatchesDeviceOptimizerInBf16) {
  for (int world : {1, 2}) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::vector<std::string> base = {"train.dtype=bf16", "train.grad_clip=1"};
      const PlacementRun device = TrainAllRanks(Make(world, stage, base, 6));
      ASSERT_OK(device.status);
      std::vector<std::string> host = base;
      host.insert(host.end(), {"zero.optimizer_tier=host", "zero.grad_tier=host"});
      const PlacementRun offload = TrainAllRanks(Make(world, stage, host, 6));
      ASSERT_OK(offload.status);
      EXPECT_EQ(offload.losses, device.losses) << "world " << world << " stage " << stage;
    }
  }
}

// The bytes of each kind sit in the tier the placement names; sizes are the padded units.
TEST(Offload, StateGoesToTheHostTier) {
  const int world = 2;
  const PlacementRun device = TrainAllRanks(Make(world, 3, {}, 2));
  const PlacementRun host = TrainAllRanks(Make(world, 3, {"zero.optimizer_tier=host", "zero.grad_tier=host",
                                         "zero.param_tier=host"}, 2));
  ASSERT_OK(device.status);
  ASSERT_OK(host.status);
  const uint64_t optimizer = Peak(device.device, StateKind::kOptimizer);
  ASSERT_GT(optimizer, 0u);
  EXPECT_EQ(Peak(host.device, StateKind::kOptimizer), 0u);
  EXPECT_EQ(Peak(host.host, StateKind::kOptimizer), optimizer);
  // Param shards (P/N, compute dtype = fp32 here) moved to the host; the device keeps only
  // gathered units.
  const uint64_t param_shards = optimizer / 3;
  EXPECT_EQ(Peak(host.host, StateKind::kParams), param_shards);
  EXPECT_LE(Peak(host.device, StateKind::kParams),
            Peak(device.device, StateKind::kParams) - param_shards);
  // fp32 grad shards (P/N) and their landing buffers (P/N in the compute dtype) on the host.
  EXPECT_EQ(Peak(host.host, StateKind::kGrads), 2 * param_shards);
  EXPECT_LT(Peak(host.device, StateKind::kGrads), Peak(device.device, StateKind::kGrads));
}

// A model whose state does not fit device.memory_limit: on the device it fails before any
// step naming the limit; with the optimizer, grads and (stage 3) params on the host it
// trains, and the device peak stays below the limit.
TEST(Offload, ModelTooBigForTheDeviceTrainsWithOffload) {
  const std::vector<std::string> bigger = {"model.layers=6", "model.channels=64"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), bigger.begin(), bigger.end());
    return Make(1, 3, extra, 6);
  };
  const std::vector<std::string> offload = {"zero.optimizer_tier=host", "zero.grad_tier=host",
                                            "zero.param_tier=host"};
  const PlacementRun on_device = TrainAllRanks(with({}));
  const PlacementRun offloaded = TrainAllRanks(with(offload));
  ASSERT_OK(on_device.status);
  ASSERT_OK(offloaded.status);
  const uint64_t need = on_device.device.peak_bytes;
  ASSERT_LT(offloaded.device.peak_bytes * 2, need) << "offload should at least halve the peak";
  const uint64_t limit = (offloaded.device.peak_bytes + need) / 2;
  const std::string limit_set = absl::StrCat("device.memory_limit=", limit);

  const PlacementRun refused = TrainAllRanks(with({limit_set}));
  EXPECT_THAT(refused.status,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("device.memory_limit")));

  auto sets = offload;
  sets.push_back(limit_set);
  const PlacementRun fits = TrainAllRanks(with(sets));
  ASSERT_OK(fits.status);
  EXPECT_LT(fits.device.peak_bytes, limit);
  EXPECT_LT(fits.losses.back(), fits.losses.front()) << "loss should fall";
}

TEST(Offload, HostTierLimitIsAClearError) {
  const PlacementRun run = TrainAllRanks(Make(1, 1, {"zero.optimizer_tier=host", "zero.grad_tier=host",
                                    "tiers.host_memory_limit=64KiB"}, 1));
  EXPECT_THAT(run.status,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("tiers.host_memory_limit")));
}

}  // namespace
}  // namespace strata
