// Model gradients against finite differences, through the whole runtime (engine, stage-0
// components, CPU kernels), for both families: a tiny GPT, a tiny LLaMA with grouped-query
// attention, an untied head, Qwen3's q/k norms and a padded vocabulary, and the same LLaMA
// tied (without the norms, with q/k/v
// biases and a head_dim of 6 against channels / heads = 4). In fp32, for
// every tensor of every unit we check
// the largest-gradient element and a few others: central differences of the mean loss
// with step 3e-3 must match the analytic gradient within 1e-3 + 3% (fp32 loss rounding
// contributes about 1e-4 absolute at this step; truncation error is far below that).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/testing/status_matchers.h"
#include "tests/engine_rig.h"

namespace strata {
namespace {

enum class Tiny { kGpt, kLlama, kLlamaTied };

Options TinyOptions(DType dtype, Tiny model = Tiny::kGpt) {
  Options options;
  options.model.layers = 2;
  options.model.heads = 2;
  options.model.channels = 16;
  options.model.vocab = 32;
  options.model.max_seq_len = 8;
  if (model != Tiny::kGpt) {
    options.model.family = ModelFamily::kLlama;
    options.model.heads = 4;
    options.model.kv_heads = 2;
    options.model.ffn_hidden = 24;
    options.model.vocab = 30;  // padded to 64
    options.model.rope.theta = 500.0f;  // angles that differ visibly across 8 positions
    options.model.tie_embeddings = model == Tiny::kLlamaTied;
    options.model.qk_norm = model == Tiny::kLlama;       // untied with q/k norms: Qwen3's attention
    options.model.qkv_bias = model == Tiny::kLlamaTied;  // tied with q/k/v biases: Qwen2's shape
    // ... and heads of their own width (Mistral Nemo's, Qwen3's head_dim): q is 24 wide.
    if (model == Tiny::kLlamaTied) options.model.head_dim = 6;
  }
  options.train.micro_batch = 2;
  options.train.seq_len = 8;
  options.train.grad_accum = 1;
  options.train.dtype = dtype;
  options.train.seed = 7;
  options.device.memory_limit = 256ull << 20;
  return options;
}

struct Fixture : EngineRig {
  std::vector<int32_t> inputs, targets;
  ModelOptions model_options;  // resolved
};

std::unique_ptr<Fixture> Make(const Options& options) {
  auto f = std::make_unique<Fixture>();
  StatusOr<std::unique_ptr<EngineRig>> rig = MakeEngineRig(options);
  EXPECT_OK(rig);
  if (!rig.ok()) return nullptr;
  static_cast<EngineRig&>(*f) = std::move(**rig);
  f->model_options = ResolveModelOptions(options.model);
  std::mt19937 rng(3);
  const int n = options.train.micro_batch * options.train.seq_len;
  for (int i = 0; i < n; ++i) {
    f->inputs.push_back(rng() % options.model.vocab);
    f->targets.push_back(rng() % options.model.vocab);
  }
  return f;
}

class ModelGradients : public ::testing::TestWithParam<Tiny> {};
INSTANTIATE_TEST_SUITE_P(Families, ModelGradients,
                         ::testing::Values(Tiny::kGpt, Tiny::kLlama, Tiny::kLlamaTied),
                         [](const auto& info) {
                           switch (info.param) {
                             case Tiny::kGpt: return std::string("Gpt");
                             case Tiny::kLlama: return std::string("Llama");
                             case Tiny::kLlamaTied: return std::string("LlamaTied");
                           }
                           return std::string();
                         });

TEST_P(ModelGradients, MatchFiniteDifferences) {
  Options options = TinyOptions(DType::kF32, GetParam());
  auto f = Make(options);
  ASSERT_NE(f, nullptr);
  MicroBatch batch{f->inputs.data(), f->targets.data()};
  ASSERT_OK(f->engine->ComputeGradients({batch}));
  const auto& units = f->model->units();
  int checked = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> grads, f->engine->state().ReadGradients(u));
    ASSERT_OK_AND_ASSIGN(std::vector<float> master, f->engine->state().ReadMaster(u));
    for (const TensorSpec& tensor : units[u].tensors()) {
      std::vector<size_t> picks;
      size_t largest = 0;
      for (size_t i = 1; i < tensor.numel; ++i) {
        if (std::fabs(grads[tensor.offset + i]) > std::fabs(grads[tensor.offset + largest])) {
          largest = i;
        }
      }
      picks.push_back(largest);
      picks.push_back(0);
      picks.push_back(tensor.numel / 2);
      picks.push_back(tensor.numel - 1);
      for (size_t i : picks) {
        const size_t index = tensor.offset + i;
        const float step = 3e-3f;
        std::vector<float> perturbed = master;
        perturbed[index] = master[index] + step;
        ASSERT_OK(f->engine->state().WriteMaster(u, perturbed));
        ASSERT_OK_AND_ASSIGN(double plus, f->engine->EvalLoss(batch));
        perturbed[index] = master[index] - step;
        ASSERT_OK(f->engine->state().WriteMaster(u, perturbed));
        ASSERT_OK_AND_ASSIGN(double minus, f->engine->EvalLoss(batch));
        ASSERT_OK(f->engine->state().WriteMaster(u, master));
        const double numeric = (plus - minus) / (2.0 * step);
        const double analytic = grads[index];
        EXPECT_NEAR(analytic, numeric, 1e-3 + 0.03 * std::fabs(numeric))
            << units[u].name() << " " << tensor.name << "[" << i << "]";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

// Alignment gaps, world padding and the padded vocabulary's rows get no gradient.
TEST_P(ModelGradients, PaddingAndGapsStayZero) {
  auto f = Make(TinyOptions(DType::kF32, GetParam()));
  ASSERT_NE(f, nullptr);
  MicroBatch batch{f->inputs.data(), f->targets.data()};
  ASSERT_OK(f->engine->ComputeGradients({batch}));
  const auto& units = f->model->units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> grads, f->engine->state().ReadGradients(u));
    std::vector<bool> used(grads.size(), false);
    const int vocab = f->model_options.vocab;
    ASSERT_GT(f->model_options.padded_vocab, vocab);
    for (const TensorSpec& t : units[u].tensors()) {
      // [padded_vocab, C] tensors: rows >= vocab are padding.
      const bool vocab_rows =
          t.name == "wte" || t.name == "tok_embeddings" || t.name == "lm_head.weight";
      const size_t real = vocab_rows ? size_t(vocab) * t.shape[1] : t.numel;
      for (size_t i = 0; i < real; ++i) used[t.offset + i] = true;
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!used[i]) ASSERT_EQ(grads[i], 0.0f) << units[u].name() << " element " << i;
    }
  }
}

TEST(GptTrace, EmbeddingAtBothEndsOfForward) {
  auto f = Make(TinyOptions(DType::kF32));
  ASSERT_NE(f, nullptr);
  const auto& trace = f->engine->trace();
  // forward: embed, block 0, block 1, final norm, lm_head(embedding); backward mirrored.
  std::vector<int> forward_units, backward_units;
  for (const UnitAccess& access : trace) {
    (access.backward ? backward_units : forward_units).push_back(access.unit);
  }
  EXPECT_EQ(forward_units, (std::vector<int>{0, 1, 2, 3, 0}));
  EXPECT_EQ(backward_units, (std::vector<int>{0, 3, 2, 1, 0}));
}

TEST(LlamaTrace, UntiedHeadIsAUnitOfItsOwn) {
  auto f = Make(TinyOptions(DType::kF32, Tiny::kLlama));
  ASSERT_NE(f, nullptr);
  std::vector<int> forward_units, backward_units;
  for (const UnitAccess& access : f->engine->trace()) {
    (access.backward ? backward_units : forward_units).push_back(access.unit);
  }
  EXPECT_EQ(forward_units, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(backward_units, (std::vector<int>{4, 3, 2, 1, 0}));
}

// bf16 compute with fp32 master weights follows the fp32 loss trajectory closely.
TEST_P(ModelGradients, Bf16TracksFp32) {
  std::vector<double> losses[2];
  for (int d = 0; d < 2; ++d) {
    Options options = TinyOptions(d == 0 ? DType::kF32 : DType::kBF16, GetParam());
    options.train.lr = 3e-3f;
    auto f = Make(options);
    ASSERT_NE(f, nullptr);
    MicroBatch batch{f->inputs.data(), f->targets.data()};
    for (int step = 0; step < 8; ++step) {
      auto result = f->engine->TrainStep({batch}, options.train.lr, step);
      ASSERT_OK(result);
      losses[d].push_back(result->loss);
    }
  }
  EXPECT_LT(losses[0].back(), losses[0].front() - 0.1);  // it learns the batch
  for (size_t i = 0; i < losses[0].size(); ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 0.02 * losses[0][i]) << "step " << i;
  }
}

}  // namespace
}  // namespace strata
