// Attention CPU kernels: fast (memory-efficient, stats-based) vs reference (materialised
// softmax) elementwise for float and bf16, at odd T, C and NH on an odd thread count,
// including head sizes that are not multiples of 16 and T over two row blocks; backward
// onto prefilled dqkv; the reference forward's stats against a log-sum-exp in double; the
// reference backward against central finite differences of the reference forward.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise (inputs in [-1, 1]):
//   float out: atol 2e-6, rtol 1e-5; stats: atol 2e-6, rtol 1e-6 (reassociated sums,
//     ExpApprox instead of expf, scale folded into q).
//   float dqkv: atol 2e-5, rtol 1e-4 (as above, and D_i = dout_i . out_i instead of the
//     row sum of P * dP).
//   bf16 out: atol 1e-4, rtol 8e-3 (adjacent bf16 values: one ulp is at most 2^-7
//     relative); bf16 stats: atol 2e-6, rtol 1e-6 (fp32, from the same bf16 inputs).
//   bf16 dqkv: atol 2e-3, rtol 8e-3 (as out, plus the fast backward's D_i uses the
//     bf16-rounded out, off by up to 2^-9 relative).
//   finite differences of the fp32 reference forward (eps 1e-3, loss sum(out * w) summed in
//     double): atol 1e-3, rtol 1e-2.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

template <typename S>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr float kOutAtol = 2e-6f, kOutRtol = 1e-5f;
  static constexpr float kGradAtol = 2e-5f, kGradRtol = 1e-4f;
};
template <>
struct Tolerance<bf16> {
  static constexpr float kOutAtol = 1e-4f, kOutRtol = 8e-3f;
  static constexpr float kGradAtol = 2e-3f, kGradRtol = 8e-3f;
};

struct Shape {
  int B, T, C, NH;
};
// hs = 13, 13, 67 (64 + tail), 16, 12; T = 1, 7, 33 and 70 (several 32-row blocks, more than
// 64 keys).
const Shape kShapes[] = {
    {1, 1, 13, 1}, {2, 7, 39, 3}, {1, 33, 67, 1}, {2, 33, 48, 3}, {1, 70, 24, 2}};

std::string Name(const char* what, const Shape& s) {
  return std::string(what) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " C=" + std::to_string(s.C) + " NH=" + std::to_string(s.NH);
}

template <typename S>
class AttentionTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(AttentionTest, StorageTypes);

TYPED_TEST(AttentionTest, ForwardMatchesReference) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH;
    const std::vector<S> qkv = ToStorage<S>(RandomFloats(size_t(B) * T * 3 * C, -1, 1, 1));
    std::vector<S> out_ref(size_t(B) * T * C), out_got(out_ref.size());
    std::vector<float> stats_ref(size_t(B) * NH * T), stats_got(stats_ref.size());
    AttentionForwardReference(out_ref.data(), stats_ref.data(), qkv.data(), B, T, C, NH);
    AttentionForward(out_got.data(), stats_got.data(), qkv.data(), B, T, C, NH);
    ExpectAllClose(ToFloats(out_got), ToFloats(out_ref), Tolerance<S>::kOutAtol,
                   Tolerance<S>::kOutRtol, Name("out", shape));
    ExpectAllClose(stats_got, stats_ref, 2e-6f, 1e-6f, Name("stats", shape));
  }
}

TYPED_TEST(AttentionTest, BackwardMatchesReferenceAndAccumulates) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH;
    const size_t qkv_size = size_t(B) * T * 3 * C;
    const std::vector<S> qkv = ToStorage<S>(RandomFloats(qkv_size, -1, 1, 2));
    const std::vector<S> dout = ToStorage<S>(RandomFloats(size_t(B) * T * C, -1, 1, 3));
    // The fast backward gets the fast forward's out and stats, as in training.
    std::vector<S> out(size_t(B) * T * C);
    std::vector<float> stats(size_t(B) * NH * T);
    AttentionForward(out.data(), stats.data(), qkv.data(), B, T, C, NH);
    // Prefilled gradients: both versions must add to them.
    const std::vector<S> dqkv0 = ToStorage<S>(RandomFloats(qkv_size, -1, 1, 4));
    std::vector<S> dqkv_ref = dqkv0, dqkv_got = dqkv0;
    AttentionBackwardReference(dqkv_ref.data(), dout.data(), qkv.data(), out.data(), stats.data(),
                               B, T, C, NH);
    AttentionBackward(dqkv_got.data(), dout.data(), qkv.data(), out.data(), stats.data(), B, T, C,
                      NH);
    ExpectAllClose(ToFloats(dqkv_got), ToFloats(dqkv_ref), Tolerance<S>::kGradAtol,
                   Tolerance<S>::kGradRtol, Name("dqkv", shape));
  }
}

TEST(AttentionReference, StatsAreLogSumExpInDouble) {
  const int B = 2, T = 7, C = 39, NH = 3, hs = C / NH;
  const std::vector<float> qkv = RandomFloats(size_t(B) * T * 3 * C, -2, 2, 5);
  std::vector<float> out(size_t(B) * T * C), stats(size_t(B) * NH * T);
  AttentionForwardReference(out.data(), stats.data(), qkv.data(), B, T, C, NH);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        double sum = 0.0;
        for (int t2 = 0; t2 <= t; ++t2) {
          double dot = 0.0;
          for (int i = 0; i < hs; ++i) {
            dot += double(qkv[(size_t(b) * T + t) * 3 * C + h * hs + i]) *
                   qkv[(size_t(b) * T + t2) * 3 * C + C + h * hs + i];
          }
          sum += std::exp(dot / std::sqrt(double(hs)));
        }
        EXPECT_NEAR(stats[(size_t(b) * NH + h) * T + t], std::log(sum), 1e-5)
            << b << " " << h << " " << t;
      }
    }
  }
  // At t = 0 a query sees only itself: out = v_0.
  for (int i = 0; i < C; ++i) EXPECT_NEAR(out[i], qkv[2 * C + i], 1e-6);
}

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  for (const Shape& shape : {Shape{1, 5, 6, 2}, Shape{2, 7, 13, 1}}) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH;
    const size_t qkv_size = size_t(B) * T * 3 * C, out_size = size_t(B) * T * C;
    std::vector<float> qkv = RandomFloats(qkv_size, -1, 1, 6);
    const std::vector<float> w = RandomFloats(out_size, -1, 1, 7);  // loss = sum(out * w)
    std::vector<float> out(out_size), stats(size_t(B) * NH * T);
    auto loss = [&] {
      AttentionForwardReference(out.data(), stats.data(), qkv.data(), B, T, C, NH);
      double total = 0.0;
      for (size_t i = 0; i < out_size; ++i) total += double(out[i]) * w[i];
      return total;
    };
    loss();
    std::vector<float> dqkv(qkv_size, 0.0f);
    AttentionBackwardReference(dqkv.data(), w.data(), qkv.data(), out.data(), stats.data(), B, T, C,
                               NH);
    ExpectAllClose(dqkv, NumericGradient(qkv, 1e-3f, loss), 1e-3f, 1e-2f,
                   Name("dqkv vs finite differences", shape));
  }
}

TEST(Attention, FastBackwardDoesNotDependOnThreadCount) {
  const int B = 2, T = 33, C = 39, NH = 3;
  const size_t qkv_size = size_t(B) * T * 3 * C;
  const std::vector<float> qkv = RandomFloats(qkv_size, -1, 1, 8);
  const std::vector<float> dout = RandomFloats(size_t(B) * T * C, -1, 1, 9);
  std::vector<float> out(size_t(B) * T * C), stats(size_t(B) * NH * T);
  AttentionForward(out.data(), stats.data(), qkv.data(), B, T, C, NH);
  std::vector<float> one(qkv_size, 0.0f), three(qkv_size, 0.0f);
  omp_set_num_threads(1);
  AttentionBackward(one.data(), dout.data(), qkv.data(), out.data(), stats.data(), B, T, C, NH);
  omp_set_num_threads(3);
  AttentionBackward(three.data(), dout.data(), qkv.data(), out.data(), stats.data(), B, T, C, NH);
  EXPECT_EQ(one, three);
}

}  // namespace
}  // namespace strata::cpu
