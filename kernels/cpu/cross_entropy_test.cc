// Fused softmax + cross-entropy CPU kernels: fast vs reference elementwise (losses and the
// gradient written over the logits) for float and bf16 at odd N and V on an odd thread count,
// including a row offset by +100 that overflows exp without the max subtraction; logits left
// untouched when dloss == 0; the reference losses against log-sum-exp in double; the
// reference gradient against central finite differences of the reference losses; gradient
// rows summing to zero.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   losses fast vs reference (both dtypes, fp32 losses): atol 1e-5, rtol 1e-5 (ExpApprox,
//     16-lane sums).
//   float gradient: atol 1e-7, rtol 1e-5; bf16 gradient: atol 1e-7, rtol 8e-3 (adjacent
//     bf16 values: one ulp is at most 2^-7 relative).
//   reference losses vs double: atol 1e-5, rtol 1e-6.
//   finite differences (fp32 reference, eps 1e-3, loss summed in double): atol 1e-3,
//     rtol 1e-2.
#include "kernels/cpu/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

struct Shape {
  int N, V, Vp;  // Vp > V: a padded vocabulary (row stride Vp, softmax over V)
};
const Shape kShapes[] = {{1, 13, 13}, {7, 67, 67}, {33, 13, 16}, {5, 1003, 1024}};

std::string Name(const char* what, const Shape& s) {
  return std::string(what) + " N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
         " Vp=" + std::to_string(s.Vp);
}

// Logits in [-4, 4]; row 1 (if any) shifted by +100, where e^x overflows fp32. Padding
// columns hold 50 (they would dominate the softmax if they took part).
std::vector<float> MakeLogits(const Shape& shape, uint32_t seed) {
  std::vector<float> logits = RandomFloats(size_t(shape.N) * shape.Vp, -4.0f, 4.0f, seed);
  for (int n = 0; n < shape.N; ++n) {
    for (int i = 0; i < shape.Vp; ++i) {
      if (i >= shape.V) logits[size_t(n) * shape.Vp + i] = 50.0f;
      if (n == 1 && i < shape.V) logits[size_t(n) * shape.Vp + i] += 100.0f;
    }
  }
  return logits;
}

template <typename T>
class CrossEntropyTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(CrossEntropyTest, StorageTypes);

TYPED_TEST(CrossEntropyTest, FastMatchesReference) {
  using T = TypeParam;
  const float grad_rtol = std::is_same<T, float>::value ? 1e-5f : 8e-3f;
  for (const Shape& shape : kShapes) {
    const int N = shape.N, V = shape.V, Vp = shape.Vp;
    const std::vector<T> logits = ToStorage<T>(MakeLogits(shape, 1));
    const std::vector<int32_t> targets = RandomTokens(N, V, 2);
    for (float dloss : {0.0f, 0.37f}) {
      std::vector<T> ref = logits, got = logits;
      std::vector<float> losses_ref(N), losses_got(N);
      SoftmaxCrossEntropyReference(losses_ref.data(), ref.data(), targets.data(), N, V, Vp, dloss);
      SoftmaxCrossEntropy(losses_got.data(), got.data(), targets.data(), N, V, Vp, dloss);
      ExpectAllClose(losses_got, losses_ref, 1e-5f, 1e-5f, Name("losses", shape));
      for (float loss : losses_got) EXPECT_TRUE(std::isfinite(loss));
      if (dloss == 0.0f) {
        // No gradient asked for: the logits must be left exactly as they were.
        EXPECT_EQ(std::memcmp(got.data(), logits.data(), logits.size() * sizeof(T)), 0);
        EXPECT_EQ(std::memcmp(ref.data(), logits.data(), logits.size() * sizeof(T)), 0);
      } else {
        ExpectAllClose(ToFloats(got), ToFloats(ref), 1e-7f, grad_rtol, Name("dlogits", shape));
        for (int n = 0; n < N; ++n) {  // padding gets no gradient
          for (int i = V; i < Vp; ++i) {
            ASSERT_EQ(Load(&got[size_t(n) * Vp + i]), 0.0f) << Name("pad", shape);
            ASSERT_EQ(Load(&ref[size_t(n) * Vp + i]), 0.0f) << Name("pad", shape);
          }
        }
      }
    }
  }
}

TEST(CrossEntropyReference, LossesMatchLogSumExpInDouble) {
  const Shape shape{7, 67, 80};
  const std::vector<float> logits = MakeLogits(shape, 3);
  const std::vector<int32_t> targets = RandomTokens(shape.N, shape.V, 4);
  std::vector<float> scratch = logits, losses(shape.N);
  SoftmaxCrossEntropyReference(losses.data(), scratch.data(), targets.data(), shape.N, shape.V,
                               shape.Vp, 0.0f);
  for (int n = 0; n < shape.N; ++n) {
    const float* row = &logits[size_t(n) * shape.Vp];
    double max_logit = row[0];
    for (int i = 0; i < shape.V; ++i) max_logit = std::max(max_logit, double(row[i]));
    double sum = 0.0;
    for (int i = 0; i < shape.V; ++i) sum += std::exp(row[i] - max_logit);
    const double expected = max_logit + std::log(sum) - row[targets[n]];
    EXPECT_NEAR(losses[n], expected, 1e-5 + 1e-6 * expected) << n;
  }
}

TEST(CrossEntropyReference, GradientMatchesFiniteDifferencesAndSumsToZero) {
  const int N = 3, V = 13;
  const float dloss = 0.37f;
  std::vector<float> logits = RandomFloats(size_t(N) * V, -3.0f, 3.0f, 5);
  const std::vector<int32_t> targets = RandomTokens(N, V, 6);
  auto total_loss = [&] {
    std::vector<float> scratch = logits, losses(N);
    SoftmaxCrossEntropyReference(losses.data(), scratch.data(), targets.data(), N, V, V, 0.0f);
    double total = 0.0;
    for (float loss : losses) total += loss;
    return dloss * total;
  };
  std::vector<float> gradient = logits, losses(N);
  SoftmaxCrossEntropyReference(losses.data(), gradient.data(), targets.data(), N, V, V, dloss);
  ExpectAllClose(gradient, NumericGradient(logits, 1e-3f, total_loss), 1e-3f, 1e-2f,
                 "dlogits vs finite differences");
  for (int n = 0; n < N; ++n) {
    double row_sum = 0.0;
    for (int i = 0; i < V; ++i) row_sum += gradient[size_t(n) * V + i];
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << n;  // softmax sums to 1, the one-hot to 1
  }
}

}  // namespace
}  // namespace strata::cpu
