// Random init (Model::InitUnit, models/common/decoder.cc): every value a function of the
// seed, the unit, the tensor and its index alone, so the values are the same bits on any
// number of threads; normal tensors have the mean and spread they ask for (within 6
// standard errors; a padded vocabulary's zero rows left out), norms' weights are ones,
// biases zeros.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/testing/status_matchers.h"
#include "models/create_model.h"

namespace strata {
namespace {

TEST(ModelInit, SameBitsOnAnyThreadCountAndTheAskedSpread) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    ModelOptions options;
    options.preset = preset;
    ASSERT_OK_AND_ASSIGN(
        const std::unique_ptr<Model> model,
        CreateModel(ResolveModelOptions(options), Recompute::kNone, DType::kF32, LoraOptions{}));
    for (size_t u = 0; u < model->units().size(); ++u) {
      const UnitLayout& layout = model->units()[u];
      std::vector<float> one(layout.used_elements(), -1.0f), three(one.size(), -2.0f);
      omp_set_num_threads(1);
      model->InitUnit(static_cast<int>(u), 42, one.data());
      omp_set_num_threads(3);
      model->InitUnit(static_cast<int>(u), 42, three.data());
      ASSERT_EQ(one, three) << preset << " unit " << layout.name();
      for (size_t t = 0; t < layout.tensors().size(); ++t) {
        const TensorSpec& spec = layout.tensor(t);
        const float* values = one.data() + spec.offset;
        if (spec.init != InitKind::kNormal) {
          const float want = spec.init == InitKind::kOnes ? 1.0f : 0.0f;
          for (size_t i = 0; i < spec.numel; ++i) ASSERT_EQ(values[i], want) << spec.name;
          continue;
        }
        if (spec.numel < 4096) continue;  // too few for the statistics below
        // A padded vocabulary's rows are zeros, not draws: left out.
        double sum = 0.0, squares = 0.0, n = 0.0;
        for (size_t i = 0; i < spec.numel; ++i) {
          if (values[i] == 0.0f) continue;
          sum += values[i];
          squares += double(values[i]) * values[i];
          n += 1.0;
        }
        const double mean = sum / n;
        const double std_dev = std::sqrt(squares / n - mean * mean);
        // Within 6 standard errors of N(0, init_std^2).
        EXPECT_NEAR(mean, 0.0, 6 * spec.init_std / std::sqrt(n)) << preset << " " << spec.name;
        EXPECT_NEAR(std_dev, spec.init_std, 6 * spec.init_std / std::sqrt(2 * n))
            << preset << " " << spec.name;
      }
    }
  }
}

}  // namespace
}  // namespace strata
