// Rotary embedding CPU kernels: the fast version against the reference (float and bf16, odd
// thread count, GQA shapes; the same table, but the fast version's clones may fuse a
// multiply and an add: float rtol 1e-6 atol 1e-7, bf16 one ulp, rtol 8e-3); the reference against the rotate-half formula in
// double; v untouched; backward(forward(x)) == x; the defining property of RoPE (the score
// of q at position p and k at position p' depends only on p - p'); and the backward against
// central finite differences.
//
// Tolerances: formula in double: atol 1e-5 (fp32 angles as Hugging Face computes them, at
// positions < 64); round trip: atol 1e-5; relative-position property: 1e-4 absolute;
// finite differences: atol 1e-3, rtol 1e-2.
#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

struct Shape {
  int B, T, NH, NKV, hs;
};
const Shape kShapes[] = {{1, 5, 2, 2, 8}, {2, 7, 4, 2, 6}, {3, 33, 6, 1, 16}};
const RopeSpec kRope{};  // theta 10000, no scaling

std::string Name(const char* what, const Shape& s) {
  return std::string(what) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
         " hs=" + std::to_string(s.hs);
}

size_t Elements(const Shape& s) { return size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.hs; }

template <typename T>
class RopeTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(RopeTest, StorageTypes);

TYPED_TEST(RopeTest, FastMatchesReference) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    for (int direction : {1, -1}) {
      const std::vector<T> x = ToStorage<T>(RandomFloats(Elements(s), -2.0f, 2.0f, 1));
      std::vector<T> ref = x, got = x;
      RopeReference(ref.data(), s.B, s.T, s.NH, s.NKV, s.hs, kRope, 3, direction);
      Rope(got.data(), s.B, s.T, s.NH, s.NKV, s.hs, kRope, 3, direction);
      const bool is_float = std::is_same_v<T, float>;
      ExpectAllClose(ToFloats(got), ToFloats(ref), is_float ? 1e-7f : 1e-4f,
                     is_float ? 1e-6f : 8e-3f, Name("rope", s));
    }
  }
}

// inv_freq_i of core/rope.h in double, written out here independently of RopeInverseFrequencies.
double InverseFrequencyInDouble(const RopeSpec& rope, int i, int hs) {
  const double plain = std::pow(double(rope.theta), -2.0 * i / hs);
  if (rope.scaling == RopeScaling::kLinear) return plain / rope.factor;
  if (rope.scaling == RopeScaling::kNone) return plain;
  const double wavelength = 2 * M_PI / plain, context = rope.original_max_seq_len;
  if (wavelength < context / rope.high_freq_factor) return plain;
  if (wavelength > context / rope.low_freq_factor) return plain / rope.factor;
  const double smooth = (context / wavelength - rope.low_freq_factor) /
                        (rope.high_freq_factor - rope.low_freq_factor);
  return (1 - smooth) * plain / rope.factor + smooth * plain;
}

class RopeSpecTest : public ::testing::TestWithParam<RopeSpec> {};

// Plain, and Llama 3's scaling with a short original context so that the 4 pairs of hs = 8
// fall in all three of its bands (kept, mixed, divided).
INSTANTIATE_TEST_SUITE_P(
    Specs, RopeSpecTest,
    ::testing::Values(kRope, RopeSpec{10000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 128}),
    [](const auto& info) { return info.param.scaling == RopeScaling::kNone ? "plain" : "llama3"; });

TEST_P(RopeSpecTest, MatchesRotateHalfInDoubleAndLeavesValuesAlone) {
  const RopeSpec rope = GetParam();
  const Shape s{2, 9, 4, 2, 8};
  const std::vector<float> x = RandomFloats(Elements(s), -2.0f, 2.0f, 2);
  std::vector<float> got = x;
  const int position0 = 5;
  RopeReference(got.data(), s.B, s.T, s.NH, s.NKV, s.hs, rope, position0, 1);
  const int row = (s.NH + 2 * s.NKV) * s.hs, half = s.hs / 2;
  std::vector<float> want = x;
  for (int b = 0; b < s.B; ++b) {
    for (int t = 0; t < s.T; ++t) {
      for (int h = 0; h < s.NH + s.NKV; ++h) {
        const size_t base = (size_t(b) * s.T + t) * row + size_t(h) * s.hs;
        for (int i = 0; i < half; ++i) {
          const double angle = (position0 + t) * InverseFrequencyInDouble(rope, i, s.hs);
          const double a = x[base + i], c = x[base + i + half];
          want[base + i] = float(a * std::cos(angle) - c * std::sin(angle));
          want[base + i + half] = float(c * std::cos(angle) + a * std::sin(angle));
        }
      }
    }
  }
  ExpectAllClose(got, want, 2e-5f, 0.0f, "rope vs rotate-half in double");
  // v (the last NKV heads of each row) is bit-unchanged.
  for (size_t r = 0; r < size_t(s.B) * s.T; ++r) {
    for (int i = (s.NH + s.NKV) * s.hs; i < row; ++i) ASSERT_EQ(got[r * row + i], x[r * row + i]);
  }
}

TEST(RopeReference, BackwardUndoesForward) {
  const Shape s{2, 17, 4, 2, 16};
  const std::vector<float> x = RandomFloats(Elements(s), -2.0f, 2.0f, 3);
  std::vector<float> y = x;
  Rope(y.data(), s.B, s.T, s.NH, s.NKV, s.hs, kRope, 0, 1);
  Rope(y.data(), s.B, s.T, s.NH, s.NKV, s.hs, kRope, 0, -1);
  ExpectAllClose(y, x, 1e-5f, 0.0f, "inverse(rope(x))");
}

TEST(RopeReference, ScoresDependOnRelativePositionOnly) {
  // One q head and one k head (NH = NKV = 1) with the same q and k at every position.
  const int T = 12, hs = 16, row = 3 * hs;
  const std::vector<float> q = RandomFloats(hs, -1.0f, 1.0f, 4);
  const std::vector<float> k = RandomFloats(hs, -1.0f, 1.0f, 5);
  std::vector<float> qkv(size_t(T) * row, 0.0f);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < hs; ++i) {
      qkv[size_t(t) * row + i] = q[i];
      qkv[size_t(t) * row + hs + i] = k[i];
    }
  }
  RopeReference(qkv.data(), 1, T, 1, 1, hs, kRope, 0, 1);
  auto score = [&](int tq, int tk) {
    double dot = 0.0;
    for (int i = 0; i < hs; ++i) dot += double(qkv[size_t(tq) * row + i]) * qkv[size_t(tk) * row + hs + i];
    return dot;
  };
  for (int delta = 0; delta < 4; ++delta) {
    for (int t = delta; t < T; ++t) EXPECT_NEAR(score(t, t - delta), score(delta, 0), 1e-4);
  }
}

TEST(RopeReference, BackwardMatchesFiniteDifferences) {
  const Shape s{1, 4, 2, 1, 6};
  std::vector<float> x = RandomFloats(Elements(s), -1.0f, 1.0f, 6);
  const std::vector<float> w = RandomFloats(x.size(), -1.0f, 1.0f, 7);  // loss = sum(out * w)
  auto loss = [&] {
    std::vector<float> y = x;
    RopeReference(y.data(), s.B, s.T, s.NH, s.NKV, s.hs, kRope, 2, 1);
    double total = 0.0;
    for (size_t i = 0; i < y.size(); ++i) total += double(y[i]) * w[i];
    return total;
  };
  std::vector<float> grad = w;
  RopeReference(grad.data(), s.B, s.T, s.NH, s.NKV, s.hs, kRope, 2, -1);
  ExpectAllClose(grad, NumericGradient(x, 1e-3f, loss), 1e-3f, 1e-2f, "d rope vs finite differences");
}

}  // namespace
}  // namespace strata::cpu
