// ZeRO stages and world sizes against the single-rank stage-0 run, with ranks as threads
// (local communicator). The global batch is the same sequences in every run: world N with
// micro_batch B takes rows [r*B, (r+1)*B) of the batch a single rank sees with N*B rows.
// - At one world size, stages 0-3 give bit-identical losses (every reduction is a
//   rank-order sum, and the gradient norm is summed from per-shard parts in one order).
// - Across world sizes the GEMMs split their sums differently, so losses agree within a
//   relative 2e-5 (fp32) over 20 steps.
// - Per-rank peak bytes by state kind follow the ZeRO formulas (see MemoryFollowsZero).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "absl/strings/str_join.h"
#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "session/ranks.h"
#include "session/session.h"
#include "tests/engine_rig.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

Options Base(int world, int stage, int micro_batch, int steps) {
  auto options = ParseOptions(
      "", {"model.preset=tiny", "model.layers=2", "model.channels=32", "model.heads=2",
           "train.seq_len=16", "train.lr=3e-3", "train.warmup_steps=2", "train.grad_accum=2",
           "train.eval_every=0", "device.threads=1", "zero.comm_timeout_s=60",
           "train.steps=" + std::to_string(steps), "train.micro_batch=" + std::to_string(micro_batch),
           "zero.world=" + std::to_string(world), "zero.stage=" + std::to_string(stage),
           "zero.prefetch_bytes=64KiB"});
  EXPECT_OK(options);
  return std::move(options).value();  // throws on an error: gtest reports it
}

struct RunResult {
  std::vector<double> losses;         // rank 0's view of the global mean loss
  std::vector<PoolStats> device_pools;  // per rank, after the run
  uint64_t deviations = 0;
};

RunResult RunTraining(const Options& options) {
  RunResult result;
  result.device_pools.resize(options.zero.world);
  std::mutex mutex;
  Status status = RunRanks(options, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
    std::vector<double> losses;
    uint64_t deviations = 0;
    for (int step = 0; step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(StepReport report, session->Step(step));
      losses.push_back(report.result.loss);
      deviations += report.result.gather.deviations;
    }
    std::lock_guard<std::mutex> lock(mutex);
    result.device_pools[communicator.rank()] = session->device().pool(Tier::kDevice).Stats();
    if (communicator.rank() == 0) result.losses = losses;
    result.deviations += deviations;
    return absl::OkStatus();
  });
  EXPECT_OK(status);
  return result;
}

constexpr int kSteps = 20;
constexpr int kRowsPerRank = 2;

TEST(ZeroEquivalence, StagesAndWorldSizesMatchSingleRankStage0) {
  for (int world = 1; world <= 4; ++world) {
    const RunResult reference = RunTraining(Base(1, 0, kRowsPerRank * world, kSteps));
    ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_LT(reference.losses.back(), reference.losses.front() - 0.3) << "it should learn";
    std::vector<double> stage0_losses;
    for (int stage = 0; stage <= 3; ++stage) {
      const RunResult run = RunTraining(Base(world, stage, kRowsPerRank, kSteps));
      ASSERT_EQ(run.losses.size(), static_cast<size_t>(kSteps))
          << "world " << world << " stage " << stage;
      EXPECT_EQ(run.deviations, 0u) << "the stage-3 executor left its plan";
      if (stage == 0) stage0_losses = run.losses;
      for (int step = 0; step < kSteps; ++step) {
        EXPECT_EQ(run.losses[step], stage0_losses[step])
            << "stages differ at one world size: world " << world << " stage " << stage
            << " step " << step;
        EXPECT_NEAR(run.losses[step], reference.losses[step], 2e-5 * reference.losses[step])
            << "world " << world << " stage " << stage << " step " << step;
      }
    }
  }
}

// The same guarantees for the LLaMA family (grouped-query attention, untied head, padded
// vocabulary), pairwise rather than the full product: world 2 at every stage with Qwen2's
// q/k/v biases, world 3 at stages 1 and 3 with Qwen3's q/k norms and a head_dim apart from
// C / H, each against the single-rank run of the same global batch.
TEST(ZeroEquivalence, LlamaStagesAndWorldSizesMatchSingleRankStage0) {
  auto llama = [](int world, int stage, int micro_batch, bool qwen3) {
    Options options = Base(world, stage, micro_batch, 10);
    options.model.family = ModelFamily::kLlama;
    options.model.heads = 4;
    options.model.kv_heads = 2;
    options.model.vocab = 250;
    options.model.tie_embeddings = false;
    options.model.rope.theta = 500.0f;
    // Qwen2's q/k/v biases, or Qwen3's q/k norms: 1-D tensors sharded with the rest.
    options.model.qkv_bias = !qwen3;
    options.model.qk_norm = qwen3;
    if (qwen3) options.model.head_dim = 6;
    EXPECT_OK(ValidateOptions(options));
    return options;
  };
  for (const auto& [world, stages] :
       std::vector<std::pair<int, std::vector<int>>>{{2, {0, 1, 2, 3}}, {3, {1, 3}}}) {
    const bool qwen3 = world == 3;
    const RunResult reference = RunTraining(llama(1, 0, kRowsPerRank * world, qwen3));
    ASSERT_EQ(reference.losses.size(), 10u);
    EXPECT_LT(reference.losses.back(), reference.losses.front() - 0.3) << "it should learn";
    std::vector<double> first;
    for (int stage : stages) {
      const RunResult run = RunTraining(llama(world, stage, kRowsPerRank, qwen3));
      ASSERT_EQ(run.losses.size(), 10u) << "world " << world << " stage " << stage;
      EXPECT_EQ(run.deviations, 0u);
      if (first.empty()) first = run.losses;
      EXPECT_EQ(run.losses, first) << "stages differ at world " << world << ", stage " << stage;
      for (size_t step = 0; step < run.losses.size(); ++step) {
        EXPECT_NEAR(run.losses[step], reference.losses[step], 2e-5 * reference.losses[step])
            << "world " << world << " stage " << stage << " step " << step;
      }
    }
  }
}

// Per-rank peak bytes by kind, world 4, on a model of 16 blocks so that blocks dominate.
// Sizes count the padded units (4 equal shards each), so sharded state is exactly 1/4.
// Allowances: stage 2-3 keep the full gradients of the
// embedding (used by the first and last backward stage) and of at most three blocks in
// flight; stage 3 keeps the param shards plus the gathered units: the prefetch budget, the
// unit in use and at most two whose release is still queued.
TEST(ZeroEquivalence, MemoryFollowsZeroFormulas) {
  const int world = 4;
  auto options_for = [&](int stage) {
    Options options = Base(world, stage, kRowsPerRank, 2);
    options.model.layers = 16;
    options.model.channels = 64;
    options.zero.prefetch_bytes = 256 << 10;
    return options;
  };
  double embedding_bytes = 0, block_bytes = 0, total_bytes = 0;
  {
    Options single = options_for(0);
    single.zero.world = 1;
    ASSERT_OK_AND_ASSIGN(auto session, TrainingSession::CreateSingleRank(single));
    const auto& units = session->model().units();
    for (const UnitLayout& unit : units) total_bytes += unit.PaddedElements(world) * 4.0;
    embedding_bytes = units[0].PaddedElements(world) * 4.0;
    block_bytes = units[1].PaddedElements(world) * 4.0;
  }
  PoolStats by_stage[4];
  for (int stage = 0; stage <= 3; ++stage) {
    by_stage[stage] = RunTraining(options_for(stage)).device_pools[0];
  }
  auto peak = [&](int stage, StateKind kind) {
    return static_cast<double>(by_stage[stage].peak_by_kind[static_cast<int>(kind)]);
  };
  // Stage 0 holds everything: grads P (compute) + P (fp32), optimizer 3P; the fp32 params
  // are the master itself (UnitWriteTargets::params_share_master), so no param bytes of their own.
  EXPECT_EQ(peak(0, StateKind::kOptimizer), 3 * total_bytes);
  EXPECT_EQ(peak(0, StateKind::kGrads), 2 * total_bytes);
  EXPECT_EQ(peak(0, StateKind::kParams), 0);
  // Stage 1: optimizer state / N, the full params P of their own.
  EXPECT_EQ(peak(1, StateKind::kOptimizer), 3 * total_bytes / world);
  EXPECT_EQ(peak(1, StateKind::kParams), total_bytes);
  EXPECT_EQ(peak(1, StateKind::kGrads), total_bytes + total_bytes / world);
  // Stage 2: gradients too (fp32 shard + full buffers of the units in flight).
  EXPECT_EQ(peak(2, StateKind::kOptimizer), 3 * total_bytes / world);
  EXPECT_LE(peak(2, StateKind::kGrads), total_bytes / world + embedding_bytes + 3 * block_bytes);
  EXPECT_LT(peak(2, StateKind::kGrads), peak(1, StateKind::kGrads) / 2);
  // Stage 3: parameters too.
  EXPECT_EQ(peak(3, StateKind::kOptimizer), 3 * total_bytes / world);
  EXPECT_LE(peak(3, StateKind::kParams),
            total_bytes / world + (256 << 10) + embedding_bytes + 3 * block_bytes);
  EXPECT_LT(peak(3, StateKind::kParams), peak(2, StateKind::kParams) * 0.7);
}

// An fp32 engine's params are its master where both hold the whole unit in the device tier
// (stage 0, optimizer and params on the device), and a copy of their own anywhere else; a
// step updates both at once (the losses of stage 0 match every other stage's above).
TEST(ZeroEquivalence, Fp32ParamsAreTheMasterWhereBothSitTogether) {
  struct Case {
    std::vector<std::string> sets;
    bool shared;
  };
  const std::vector<Case> cases = {
      {{"zero.stage=0"}, true},
      {{"zero.stage=0", "train.dtype=bf16"}, false},
      {{"zero.stage=1"}, false},
      {{"zero.stage=1", "zero.optimizer_tier=host"}, false},
      {{"zero.stage=0", "lora.rank=2"}, true},  // the adapters; the frozen base has no master
  };
  for (const Case& c : cases) {
    std::vector<std::string> sets = {"model.preset=tiny", "model.layers=2",   "model.channels=32",
                                     "model.heads=2",     "train.seq_len=16", "device.threads=1"};
    sets.insert(sets.end(), c.sets.begin(), c.sets.end());
    ASSERT_OK_AND_ASSIGN(const Options options, ParseOptions("", sets));
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
    for (size_t u = 0; u < rig->model->units().size(); ++u) {
      const bool trainable = rig->model->units()[u].trainable();
      EXPECT_EQ(rig->engine->state().WriteTargets(static_cast<int>(u)).params_share_master, c.shared && trainable)
          << absl::StrJoin(c.sets, " ") << " unit " << u;
    }
    // Written through either, read back through both.
    const int unit = static_cast<int>(rig->model->units().size()) - 1;
    std::vector<float> values(rig->engine->state().PaddedElements(unit));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 17);
    if (!rig->model->units()[unit].trainable()) continue;
    ASSERT_OK(rig->engine->state().WriteMaster(unit, values));
    ASSERT_OK_AND_ASSIGN(const std::vector<float> params, rig->engine->state().ReadParams(unit));
    ASSERT_OK_AND_ASSIGN(const UnitOptimizerState state,
                         rig->engine->state().ReadOptimizerState(unit));
    EXPECT_EQ(params, state.master);
    EXPECT_EQ(std::vector<float>(params.begin(), params.begin() + 34),
              std::vector<float>(values.begin(), values.begin() + 34));
  }
}

TEST(ZeroEquivalence, DeadRankIsAClearErrorNotAHang) {
  Options options = Base(2, 2, kRowsPerRank, 3);
  options.zero.comm_timeout_s = 2.0f;
  Status status = RunRanks(options, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
    if (communicator.rank() == 1) return absl::OkStatus();  // stops answering
    for (int step = 0; step < options.train.steps; ++step) {
      RETURN_IF_ERROR(session->Step(step).status());
    }
    return absl::OkStatus();
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank")));
}

}  // namespace
}  // namespace strata
