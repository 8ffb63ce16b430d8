// LoRA through the whole runtime (models, engine, ZeRO components, homes), both families:
// adapter gradients against finite differences; the adapted model starts equal to its
// base; training leaves the base bit-unchanged and moves only the adapters; gradient and
// optimizer bytes are the adapters' alone; and the equivalence guarantees hold for LoRA
// runs across stages, placements of the base and of the adapters, and world sizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "core/testing/status_matchers.h"
#include "tests/engine_rig.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

enum class Family { kGpt, kLlama };

std::string Name(Family family) { return family == Family::kGpt ? "Gpt" : "Llama"; }

Options TinyOptions(Family family, int rank, const std::string& targets) {
  Options options;
  options.model.layers = 2;
  options.model.heads = 2;
  options.model.channels = 16;
  options.model.vocab = 32;
  options.model.max_seq_len = 8;
  if (family == Family::kLlama) {
    options.model.family = ModelFamily::kLlama;
    options.model.heads = 4;
    options.model.kv_heads = 2;
    options.model.ffn_hidden = 24;
    options.model.rope.theta = 500.0f;
    options.model.tie_embeddings = false;
  }
  options.lora.rank = rank;
  options.lora.alpha = 3.0f;
  options.lora.targets = targets;
  options.train.micro_batch = 2;
  options.train.seq_len = 8;
  options.train.grad_accum = 1;
  options.train.dtype = DType::kF32;
  options.train.seed = 11;
  options.device.memory_limit = 256ull << 20;
  return options;
}

// Gives every adapter's B random values (it starts at zero, where A gets no gradient).
void RandomizeB(EngineRig& rig) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const auto& units = rig.model->units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!units[u].trainable()) continue;
    ASSERT_OK_AND_ASSIGN(std::vector<float> master, rig.engine->state().ReadMaster(u));
    for (const TensorSpec& t : units[u].tensors()) {
      if (t.name.find("lora_B") == std::string::npos) continue;
      for (size_t i = 0; i < t.numel; ++i) master[t.offset + i] = normal(rng);
    }
    ASSERT_OK(rig.engine->state().WriteMaster(u, master));
  }
}

class LoraFamilies : public ::testing::TestWithParam<Family> {};
INSTANTIATE_TEST_SUITE_P(Families, LoraFamilies, ::testing::Values(Family::kGpt, Family::kLlama),
                         [](const auto& info) { return Name(info.param); });

// Every adapter tensor of every block, every target of the family (GPT-2's fused qkv as one
// target; LLaMA's q, k, v and gate, up as column slices of fused projections): central
// differences of the mean loss with step 3e-3 match the analytic gradient within 1e-3 +
// 3% (as the full-model gradient test). The base has no gradients at all.
TEST_P(LoraFamilies, AdapterGradientsMatchFiniteDifferences) {
  const Options options = TinyOptions(GetParam(), 2, "all");
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
  RandomizeB(*rig);
  const RandomTokens batch = RandomBatch(options);
  ASSERT_OK(rig->engine->ComputeGradients({batch.micro()}));
  const auto& units = rig->model->units();
  int checked = 0, adapters = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!units[u].trainable()) {
      EXPECT_THAT(rig->engine->state().ReadGradients(u), StatusIs(absl::StatusCode::kFailedPrecondition))
          << units[u].name();
      continue;
    }
    ++adapters;
    ASSERT_OK_AND_ASSIGN(std::vector<float> grads, rig->engine->state().ReadGradients(u));
    ASSERT_OK_AND_ASSIGN(std::vector<float> master, rig->engine->state().ReadMaster(u));
    for (const TensorSpec& tensor : units[u].tensors()) {
      size_t largest = 0;
      for (size_t i = 1; i < tensor.numel; ++i) {
        if (std::fabs(grads[tensor.offset + i]) > std::fabs(grads[tensor.offset + largest])) {
          largest = i;
        }
      }
      EXPECT_GT(std::fabs(grads[tensor.offset + largest]), 1e-4)
          << units[u].name() << " " << tensor.name << " has no gradient";
      for (size_t i : {largest, size_t{0}, tensor.numel / 2, tensor.numel - 1}) {
        const size_t index = tensor.offset + i;
        const float step = 3e-3f;
        std::vector<float> perturbed = master;
        perturbed[index] = master[index] + step;
        ASSERT_OK(rig->engine->state().WriteMaster(u, perturbed));
        ASSERT_OK_AND_ASSIGN(double plus, rig->engine->EvalLoss(batch.micro()));
        perturbed[index] = master[index] - step;
        ASSERT_OK(rig->engine->state().WriteMaster(u, perturbed));
        ASSERT_OK_AND_ASSIGN(double minus, rig->engine->EvalLoss(batch.micro()));
        ASSERT_OK(rig->engine->state().WriteMaster(u, master));
        const double numeric = (plus - minus) / (2.0 * step);
        EXPECT_NEAR(grads[index], numeric, 1e-3 + 0.03 * std::fabs(numeric))
            << units[u].name() << " " << tensor.name << "[" << i << "]";
        ++checked;
      }
    }
  }
  EXPECT_EQ(adapters, options.model.layers);
  // gpt: 4 targets x (A, B); llama: 7 targets x (A, B); 4 picks each, per block.
  EXPECT_EQ(checked, options.model.layers * (GetParam() == Family::kGpt ? 4 : 7) * 2 * 4);
}

// With lora.dropout, a training micro-batch's masks are a function of (seed, step, micro-
// batch, global row, position, channel): ComputeGradients of the same batch draws the same
// masks each time, so central differences of its loss check the adapters' gradients
// through the dropout (the mask on A's input and on the input's gradient). Dropout changes
// the loss (it is not a no-op) and evaluation draws none.
TEST_P(LoraFamilies, DropoutGradientsMatchFiniteDifferences) {
  Options options = TinyOptions(GetParam(), 2, "all");
  options.lora.dropout = 0.3f;
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
  RandomizeB(*rig);
  const RandomTokens batch = RandomBatch(options);
  ASSERT_OK_AND_ASSIGN(const double loss, rig->engine->ComputeGradients({batch.micro()}));
  ASSERT_OK_AND_ASSIGN(const double eval, rig->engine->EvalLoss(batch.micro()));
  EXPECT_NE(loss, eval);
  ASSERT_OK_AND_ASSIGN(const double again, rig->engine->ComputeGradients({batch.micro()}));
  EXPECT_EQ(loss, again);
  const auto& units = rig->model->units();
  int checked = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!units[u].trainable()) continue;
    ASSERT_OK(rig->engine->ComputeGradients({batch.micro()}));
    ASSERT_OK_AND_ASSIGN(std::vector<float> grads, rig->engine->state().ReadGradients(u));
    ASSERT_OK_AND_ASSIGN(std::vector<float> master, rig->engine->state().ReadMaster(u));
    for (const TensorSpec& tensor : units[u].tensors()) {
      if (tensor.name.find("lora_A") == std::string::npos) continue;  // B does not see it
      size_t largest = 0;
      for (size_t i = 1; i < tensor.numel; ++i) {
        if (std::fabs(grads[tensor.offset + i]) > std::fabs(grads[tensor.offset + largest])) {
          largest = i;
        }
      }
      for (size_t i : {largest, tensor.numel / 3}) {
        const size_t index = tensor.offset + i;
        const float step = 3e-3f;
        std::vector<float> perturbed = master;
        perturbed[index] = master[index] + step;
        ASSERT_OK(rig->engine->state().WriteMaster(u, perturbed));
        ASSERT_OK_AND_ASSIGN(double plus, rig->engine->ComputeGradients({batch.micro()}));
        perturbed[index] = master[index] - step;
        ASSERT_OK(rig->engine->state().WriteMaster(u, perturbed));
        ASSERT_OK_AND_ASSIGN(double minus, rig->engine->ComputeGradients({batch.micro()}));
        ASSERT_OK(rig->engine->state().WriteMaster(u, master));
        const double numeric = (plus - minus) / (2.0 * step);
        EXPECT_NEAR(grads[index], numeric, 1e-3 + 0.03 * std::fabs(numeric))
            << units[u].name() << " " << tensor.name << "[" << i << "]";
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, options.model.layers * (GetParam() == Family::kGpt ? 4 : 7) * 2);
}

// B starts at zero: the adapted model's loss is its base's, bit for bit; the base units
// get the same initial values as without LoRA.
TEST_P(LoraFamilies, StartsEqualToTheBase) {
  const Options with = TinyOptions(GetParam(), 4, "all");
  Options without = with;
  without.lora.rank = 0;
  ASSERT_OK_AND_ASSIGN(auto lora, MakeEngineRig(with));
  ASSERT_OK_AND_ASSIGN(auto plain, MakeEngineRig(without));
  const RandomTokens batch = RandomBatch(with);
  ASSERT_OK_AND_ASSIGN(double a, lora->engine->EvalLoss(batch.micro()));
  ASSERT_OK_AND_ASSIGN(double b, plain->engine->EvalLoss(batch.micro()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(lora->model->units().size(),
            plain->model->units().size() + static_cast<size_t>(with.model.layers));
}

// Training moves the adapters and lowers the loss; every base unit's params stay bit for
// bit what they were.
TEST_P(LoraFamilies, TrainingLeavesTheBaseUnchanged) {
  Options options = TinyOptions(GetParam(), 4, "");
  options.train.lr = 3e-2f;
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
  const auto& units = rig->model->units();
  std::vector<std::vector<float>> before;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> params, rig->engine->state().ReadParams(u));
    before.push_back(std::move(params));
  }
  const RandomTokens batch = RandomBatch(options);
  std::vector<double> losses;
  for (int step = 0; step < 6; ++step) {
    ASSERT_OK_AND_ASSIGN(StepResult result,
                         rig->engine->TrainStep({batch.micro()}, options.train.lr, step));
    losses.push_back(result.loss);
  }
  EXPECT_LT(losses.back(), losses.front() - 0.01) << absl::StrJoin(losses, " ");
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> after, rig->engine->state().ReadParams(u));
    if (units[u].trainable()) {
      EXPECT_NE(after, before[u]) << units[u].name() << " did not train";
    } else {
      EXPECT_EQ(after, before[u]) << units[u].name() << " changed";
      EXPECT_THAT(rig->engine->state().ReadMaster(u), StatusIs(absl::StatusCode::kFailedPrecondition));
    }
  }
}

TEST(Lora, UnknownTargetIsNamed) {
  Options options = TinyOptions(Family::kLlama, 2, "q_proj,c_attn");
  EXPECT_THAT(MakeEngineRig(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'c_attn'"), HasSubstr("attn.q (q_proj)"))));
}

// The device pools' gradient and optimizer peaks are the adapters' alone: stage 0 keeps a
// full compute-dtype gradient and an fp32 sum per trainable unit, and fp32 master + two
// moments; a frozen base has none of them.
TEST(Lora, GradientAndOptimizerBytesAreTheAdaptersAlone) {
  for (const bool llama : {false, true}) {
    std::vector<std::string> sets = {"lora.rank=4", "lora.targets=all"};
    if (llama) sets.insert(sets.begin(), TinyLlamaSets().begin(), TinyLlamaSets().end());
    const Options options = PlacementRunOptions(1, 0, sets, 2);
    const PlacementRun run = TrainAllRanks(options);
    ASSERT_OK(run.status);
    ASSERT_OK_AND_ASSIGN(
        auto model, CreateModel(options.model, Recompute::kNone, options.train.dtype, options.lora));
    uint64_t adapter_elements = 0;
    for (const UnitLayout& unit : model->units()) {
      if (unit.trainable()) adapter_elements += unit.PaddedElements(1);
    }
    ASSERT_GT(adapter_elements, 0u);
    const uint64_t element = DTypeBytes(options.train.dtype);
    EXPECT_EQ(Peak(run.device, StateKind::kOptimizer), adapter_elements * 3 * 4) << llama;
    EXPECT_EQ(Peak(run.device, StateKind::kGrads), adapter_elements * (element + 4)) << llama;
    EXPECT_EQ(Peak(run.host, StateKind::kOptimizer), 0u);
  }
}

// With dropout (its masks follow the global sample). The reference is one rank at stage 0
// with everything on the device. At one rank every
// stage and placement (the base on host or nvme behind stage 3's gathers, the adapters'
// optimizer on host or nvme, recompute) gives the same losses bit for bit. Two ranks of
// half the micro-batch train on the same global batch: their gradient reductions sum in
// another order, so they match within fp32 rounding, and every stage and placement at two
// ranks gives the bits of stage 0 at two ranks.
TEST(Lora, PlacementsAndWorldSizesMatch) {
  for (const bool llama : {false, true}) {
    std::vector<std::string> base = {"lora.rank=4", "lora.alpha=8", "lora.targets=all",
                                     "lora.dropout=0.1", "train.grad_clip=0",
                                     "zero.nvme_dir=" + TestDir("lora")};
    if (llama) base.insert(base.begin(), TinyLlamaSets().begin(), TinyLlamaSets().end());
    struct Case {
      int world, stage;
      std::vector<std::string> sets;
    };
    auto run = [&](const Case& c) {
      std::vector<std::string> sets = base;
      if (c.world == 2) sets.push_back("train.micro_batch=1");
      sets.insert(sets.end(), c.sets.begin(), c.sets.end());
      return TrainAllRanks(PlacementRunOptions(c.world, c.stage, sets, 6));
    };
    auto what = [&](const Case& c) {
      return absl::StrCat(llama ? "llama" : "gpt", " world ", c.world, " stage ", c.stage, " ",
                          absl::StrJoin(c.sets, " "));
    };
    const PlacementRun reference = run({1, 0, {}});
    ASSERT_OK(reference.status);
    ASSERT_EQ(reference.losses.size(), 6u);
    EXPECT_LT(reference.losses.back(), reference.losses.front());
    const PlacementRun reference2 = run({2, 0, {}});
    ASSERT_OK(reference2.status);
    ASSERT_EQ(reference2.losses.size(), 6u);
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      EXPECT_NEAR(reference2.losses[i], reference.losses[i], 1e-5 * reference.losses[i])
          << (llama ? "llama" : "gpt") << " two ranks, step " << i;
    }
    const std::vector<Case> cases = {
        {1, 2, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
        {1, 3, {"lora.base_tier=nvme"}},
        {1, 3, {"lora.base_tier=host", "zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                "train.recompute=blocks"}},
        {2, 1, {}},
        {2, 3, {"lora.base_tier=nvme"}},
        {2, 3, {"lora.base_tier=nvme", "zero.optimizer_tier=nvme", "zero.grad_tier=nvme",
                "zero.param_tier=nvme", "nvme.chunk_bytes=8KiB"}},
        {2, 2, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
    };
    for (const Case& c : cases) {
      const PlacementRun out = run(c);
      ASSERT_OK(out.status) << what(c);
      EXPECT_EQ(out.losses, (c.world == 1 ? reference : reference2).losses) << what(c);
    }
  }
}

// A frozen base on nvme with the adapters on the device: the base's params never occupy
// the device between uses (only gathered copies), and the swap file is read every step.
TEST(Lora, BaseOnNvmeStreamsFromTheDisk) {
  const std::vector<std::string> sets = {"lora.rank=4", "lora.base_tier=nvme",
                                         "zero.nvme_dir=" + TestDir("lora_stream")};
  const PlacementRun on_device = TrainAllRanks(PlacementRunOptions(1, 3, {"lora.rank=4"}, 3));
  const PlacementRun on_nvme = TrainAllRanks(PlacementRunOptions(1, 3, sets, 3));
  ASSERT_OK(on_device.status);
  ASSERT_OK(on_nvme.status);
  EXPECT_EQ(on_nvme.losses, on_device.losses);
  for (const StepResult& step : on_nvme.steps) EXPECT_GT(step.nvme_read_bytes, 0u);
  // Between steps the device keeps only the adapters' params.
  EXPECT_LT(on_nvme.device_setup.current_by_kind[static_cast<int>(StateKind::kParams)],
            on_device.device_setup.current_by_kind[static_cast<int>(StateKind::kParams)] / 4);
}

// A LoRA checkpoint holds the adapters (and their optimizer state) and refers to the base
// by its hash: a resumed run continues the uninterrupted one bit for bit (the base loaded
// again from its source), a checkpoint does not resume onto another base, and a full
// training run refuses it.
TEST(Lora, CheckpointsHoldTheAdaptersAndResume) {
  const std::string dir = TestDir("lora_checkpoints");
  std::vector<std::string> sets = {"lora.rank=4", "lora.targets=all",
                                   "train.checkpoint_dir=" + dir, "train.checkpoint_every=3"};
  const PlacementRun whole = TrainAllRanks(PlacementRunOptions(1, 2, sets, 6));
  ASSERT_OK(whole.status);
  ASSERT_EQ(whole.losses.size(), 6u);
  ASSERT_OK_AND_ASSIGN(OpenedCheckpoint opened, OpenCheckpoint(dir + "/step-3"));
  EXPECT_EQ(opened.lora.rank, 4);
  EXPECT_EQ(opened.lora.targets, "attn.qkv,attn.proj,mlp.fc,mlp.proj");
  EXPECT_EQ(opened.base.xxh3.size(), 16u);
  ASSERT_EQ(opened.units.size(), 2u);  // the adapters of the two blocks alone
  EXPECT_EQ(opened.units[0].name, "block 0 lora");

  // Resumed at another stage: the same losses, bit for bit.
  std::vector<std::string> resume = sets;
  resume.push_back("train.resume=" + dir + "/step-3");
  const PlacementRun resumed = TrainAllRanks(PlacementRunOptions(1, 3, resume, 6));
  ASSERT_OK(resumed.status);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], whole.losses[3 + i]) << i;

  std::vector<std::string> other_base = resume;
  other_base.push_back("train.seed=99");
  EXPECT_THAT(TrainAllRanks(PlacementRunOptions(1, 2, other_base, 6)).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another base model")));
  std::vector<std::string> full = {"train.resume=" + dir + "/step-3"};
  EXPECT_THAT(TrainAllRanks(PlacementRunOptions(1, 2, full, 6)).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds LoRA adapters")));
  std::vector<std::string> other_rank = resume;
  other_rank.push_back("lora.rank=2");
  EXPECT_THAT(TrainAllRanks(PlacementRunOptions(1, 2, other_rank, 6)).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lora.rank=4")));
}

TEST(Lora, BaseTierNeedsStageThreeAndLora) {
  Options options = TinyOptions(Family::kGpt, 2, "");
  options.lora.base_tier = StateTier::kHost;
  options.zero.stage = 2;
  EXPECT_THAT(MakeEngineRig(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lora.base_tier=host needs zero.stage=3")));
  options.zero.stage = 3;
  options.lora.rank = 0;
  EXPECT_THAT(MakeEngineRig(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lora.rank is 0")));
}

}  // namespace
}  // namespace strata
