// zero.param_update=delayed (ZeRO-Offload's one-step delayed parameter update) against a
// reference built from the exact runtime and the specification Adam:
//   step t computes its gradient g_t on the params P_t, with P_0 = P_1 = theta_0 and
//   P_t = theta_{t-1} (t >= 2), where theta_t = AdamW_{step t+1}(theta_{t-1}, g_t) is the
//   update made from step t's gradient (so one update is always in flight).
// The reference gets g_t and the loss from a second engine (optimizer on the device)
// whose params are set to P_t, and applies CpuAdamReference test-side. The delayed run's
// losses must match it within 1e-6 relative (both sides use bit-identical Adam formulas and
// the same kernels; the tolerance only covers the norm's summation order with clipping),
// and differ from an exact run's from step 1 on by far more, so the test tells the two
// apart; the norm a delayed step reports is that of the update it enqueued (the previous
// step's gradient; 0 at the first step). World 2 (stages 1-3) must give the same losses at
// every stage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "kernels/cpu/cpu_adam.h"
#include "tests/engine_rig.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

constexpr int kSteps = 6;

Options EngineOptions(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.preset=tiny", "model.layers=2", "model.heads=2",
                                  "model.channels=32", "model.vocab=64", "model.max_seq_len=16",
                                  "train.micro_batch=2", "train.seq_len=16", "train.grad_accum=2",
                                  "train.weight_decay=0.1", "device.threads=1", "train.seed=5"};
  all.insert(all.end(), sets.begin(), sets.end());
  StatusOr<Options> options = ParseOptions("", all);
  EXPECT_OK(options);
  return std::move(options).value();  // throws on an error: gtest reports it
}

std::unique_ptr<EngineRig> MakeRig(const Options& options) {
  StatusOr<std::unique_ptr<EngineRig>> rig = MakeEngineRig(options);
  EXPECT_OK(rig);
  return rig.ok() ? std::move(*rig) : nullptr;
}

// kSteps steps of grad_accum random micro-batches (the same for every run).
struct Data {
  std::vector<std::vector<int32_t>> tokens;  // [step * accum + k][2 * B * T]
  std::vector<MicroBatch> Step(int step, int accum, int n) {
    std::vector<MicroBatch> batches;
    for (int k = 0; k < accum; ++k) {
      const std::vector<int32_t>& t = tokens[step * accum + k];
      batches.push_back({t.data(), t.data() + n});
    }
    return batches;
  }
};

Data MakeData(const Options& options) {
  Data data;
  std::mt19937 rng(11);
  const int n = options.train.micro_batch * options.train.seq_len;
  for (int i = 0; i < kSteps * options.train.grad_accum; ++i) {
    std::vector<int32_t> t(2 * n);
    for (int32_t& token : t) token = static_cast<int32_t>(rng() % options.model.vocab);
    data.tokens.push_back(std::move(t));
  }
  return data;
}

float LearningRate(int step) { return 2e-2f * (1.0f + 0.25f * step); }

struct Trajectory {
  std::vector<double> losses, norms;
};

Trajectory Train(Engine& engine, Data& data, const Options& options) {
  Trajectory out;
  const int n = options.train.micro_batch * options.train.seq_len;
  for (int t = 0; t < kSteps; ++t) {
    StatusOr<StepResult> result =
        engine.TrainStep(data.Step(t, options.train.grad_accum, n), LearningRate(t), t);
    EXPECT_OK(result) << "step " << t;
    if (!result.ok()) break;
    out.losses.push_back(result->loss);
    out.norms.push_back(result->grad_norm);
  }
  return out;
}

// The reference trajectory's losses and gradient norms (see the top of the file).
StatusOr<Trajectory> Reference(const Options& options, Data& data) {
  Options exact = options;
  exact.zero.optimizer_tier = exact.zero.grad_tier = StateTier::kDevice;
  exact.zero.param_update = ParamUpdate::kExact;
  ASSIGN_OR_RETURN(std::unique_ptr<EngineRig> rig, MakeEngineRig(exact));
  Engine& engine = *rig->engine;
  const auto& units = rig->model->units();
  const size_t num_units = units.size();
  std::vector<std::vector<float>> theta(num_units), m(num_units), v(num_units);
  for (size_t u = 0; u < num_units; ++u) {
    ASSIGN_OR_RETURN(theta[u], engine.state().ReadMaster(static_cast<int>(u)));
    m[u].assign(theta[u].size(), 0.0f);
    v[u].assign(theta[u].size(), 0.0f);
  }
  // published[t]: the params step t computes on.
  std::vector<std::vector<std::vector<float>>> published = {theta, theta};
  Trajectory out;
  const int n = options.train.micro_batch * options.train.seq_len;
  for (int t = 0; t < kSteps; ++t) {
    for (size_t u = 0; u < num_units; ++u) {
      RETURN_IF_ERROR(engine.state().WriteMaster(static_cast<int>(u), published[t][u]));
    }
    ASSIGN_OR_RETURN(const double loss,
                     engine.ComputeGradients(data.Step(t, options.train.grad_accum, n)));
    out.losses.push_back(loss);
    std::vector<std::vector<float>> grads(num_units);
    double squares = 0.0;
    for (size_t u = 0; u < num_units; ++u) {
      ASSIGN_OR_RETURN(grads[u], engine.state().ReadGradients(static_cast<int>(u)));
      for (float g : grads[u]) squares += static_cast<double>(g) * g;
    }
    AdamParams hp;
    hp.lr = LearningRate(t);
    hp.beta1 = options.train.beta1;
    hp.beta2 = options.train.beta2;
    hp.eps = options.train.eps;
    hp.step = t + 1;
    const double norm = std::sqrt(squares);
    out.norms.push_back(norm);
    if (options.train.grad_clip > 0 && norm > options.train.grad_clip) {
      hp.grad_scale = static_cast<float>(options.train.grad_clip / (norm + 1e-6));
    }
    for (size_t u = 0; u < num_units; ++u) {
      for (const TensorSpec& tensor : units[u].tensors()) {
        AdamParams tensor_hp = hp;
        tensor_hp.weight_decay = tensor.weight_decay ? options.train.weight_decay : 0.0f;
        const size_t o = tensor.offset;
        cpu::CpuAdamReference<float>(nullptr, theta[u].data() + o, grads[u].data() + o,
                                m[u].data() + o, v[u].data() + o, tensor.numel, tensor_hp);
      }
    }
    published.push_back(theta);  // what step t + 2 computes on
  }
  return out;
}

class DelayedUpdate : public ::testing::TestWithParam<const char*> {};

TEST_P(DelayedUpdate, MatchesTheReferenceTrajectory) {
  const Options options = EngineOptions({"zero.stage=2", "zero.optimizer_tier=host",
                                         "zero.grad_tier=host", "zero.param_update=delayed",
                                         GetParam()});
  Data data = MakeData(options);
  ASSERT_OK_AND_ASSIGN(const Trajectory reference, Reference(options, data));
  auto delayed_rig = MakeRig(options);
  ASSERT_NE(delayed_rig, nullptr);
  const Trajectory delayed = Train(*delayed_rig->engine, data, options);
  Options exact_options = options;
  exact_options.zero.param_update = ParamUpdate::kExact;
  auto exact_rig = MakeRig(exact_options);
  ASSERT_NE(exact_rig, nullptr);
  const Trajectory exact = Train(*exact_rig->engine, data, exact_options);
  ASSERT_EQ(delayed.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(exact.losses.size(), static_cast<size_t>(kSteps));
  for (int t = 0; t < kSteps; ++t) {
    EXPECT_NEAR(delayed.losses[t], reference.losses[t], 1e-6 * std::fabs(reference.losses[t]))
        << "step " << t;
    // The norm a delayed step reports is that of the update it enqueued: the previous
    // step's gradient (none at step 0). Tolerance: fp32 partial sums vs the test's fp64.
    const double norm = t == 0 ? 0.0 : reference.norms[t - 1];
    EXPECT_NEAR(delayed.norms[t], norm, 1e-5 * norm) << "step " << t;
    if (t == 0) {
      EXPECT_EQ(delayed.losses[t], exact.losses[t]);  // both on theta_0
    } else {
      EXPECT_GT(std::fabs(delayed.losses[t] - exact.losses[t]), 1e-4) << "step " << t;
    }
  }
}

// Without and with clipping (GPT), and a tied multi-head LLaMA without clipping.
INSTANTIATE_TEST_SUITE_P(Clipping, DelayedUpdate,
                         ::testing::Values("train.grad_clip=0", "train.grad_clip=0.5",
                                           "model.family=llama"));

// The last step's update is still pending when training ends: Finish enqueues it, and its
// check of the norm reports a diverged run instead of exiting quietly.
TEST(DelayedUpdate, FinishAppliesThePendingUpdateAndReportsItsErrors) {
  const Options options = EngineOptions({"zero.stage=2", "zero.optimizer_tier=host",
                                         "zero.grad_tier=host", "zero.param_update=delayed"});
  Data data = MakeData(options);
  auto rig = MakeRig(options);
  ASSERT_NE(rig, nullptr);
  const int n = options.train.micro_batch * options.train.seq_len;
  // An absurd learning rate: the update of step 0 (applied after step 1) blows the params
  // up, so step 2's gradient is not finite; only its own (pending) update would see it.
  for (int t = 0; t < 3; ++t) {
    StatusOr<StepResult> result =
        rig->engine->TrainStep(data.Step(t, options.train.grad_accum, n), 1e30f, t);
    ASSERT_OK(result) << "step " << t;
  }
  EXPECT_THAT(rig->engine->Finish(),
              testing::StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr("not finite")));
}

TEST(DelayedUpdate, EveryStageGivesTheSameLossesAtWorldTwo) {
  for (bool llama : {false, true}) {
    std::vector<double> first;
    for (int stage = 1; stage <= 3; ++stage) {
      std::vector<std::string> sets = {"zero.optimizer_tier=host", "zero.grad_tier=host",
                                       "zero.param_update=delayed"};
      if (llama) sets.insert(sets.end(), TinyLlamaSets().begin(), TinyLlamaSets().end());
      const PlacementRun run = TrainAllRanks(PlacementRunOptions(2, stage, sets, 4));
      ASSERT_OK(run.status) << "stage " << stage << (llama ? " llama" : " gpt");
      ASSERT_EQ(run.losses.size(), 4u);
      if (first.empty()) {
        first = run.losses;
      } else {
        EXPECT_EQ(run.losses, first) << "stage " << stage << (llama ? " llama" : " gpt");
      }
    }
  }
}

}  // namespace
}  // namespace strata
