// Attention CPU kernels: fast (memory-efficient, stats-based) vs reference (materialised
// softmax) elementwise for float and bf16, at odd T, C and NH (and grouped-query NKV < NH)
// on an odd thread count,
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
//   grouped-query vs multi-head with repeated key/value heads (fast, fp32): out bit-equal,
//     dqkv atol 1e-6, rtol 1e-5 (dk/dv summed in another order).
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
  int B, T, C, NH, NKV;
  size_t qkv_size() const { return size_t(B) * T * (C + 2 * NKV * (C / NH)); }
};
// hs = 13, 13, 67 (64 + tail), 16, 12, 8, 16; T = 1, 7, 33 and 70 (several 32-row blocks,
// more than 64 keys); grouped-query shapes with 2 and 3 query heads per key/value head.
const Shape kShapes[] = {{1, 1, 13, 1, 1},  {2, 7, 39, 3, 3}, {1, 33, 67, 1, 1},
                         {2, 33, 48, 3, 3}, {1, 70, 24, 2, 2}, {2, 9, 48, 6, 2},
                         {1, 35, 64, 4, 2}};

std::string Name(const char* what, const Shape& s) {
  return std::string(what) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " C=" + std::to_string(s.C) + " NH=" + std::to_string(s.NH) +
         " NKV=" + std::to_string(s.NKV);
}

template <typename S>
class AttentionTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(AttentionTest, StorageTypes);

TYPED_TEST(AttentionTest, ForwardMatchesReference) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    const std::vector<S> qkv = ToStorage<S>(RandomFloats(shape.qkv_size(), -1, 1, 1));
    std::vector<S> out_ref(size_t(B) * T * C), out_got(out_ref.size());
    std::vector<float> stats_ref(size_t(B) * NH * T), stats_got(stats_ref.size());
    AttentionForwardReference(out_ref.data(), stats_ref.data(), qkv.data(), B, T, C, NH, NKV);
    AttentionForward(out_got.data(), stats_got.data(), qkv.data(), B, T, C, NH, NKV);
    ExpectAllClose(ToFloats(out_got), ToFloats(out_ref), Tolerance<S>::kOutAtol,
                   Tolerance<S>::kOutRtol, Name("out", shape));
    ExpectAllClose(stats_got, stats_ref, 2e-6f, 1e-6f, Name("stats", shape));
  }
}

TYPED_TEST(AttentionTest, BackwardMatchesReferenceAndAccumulates) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    const size_t qkv_size = shape.qkv_size();
    const std::vector<S> qkv = ToStorage<S>(RandomFloats(qkv_size, -1, 1, 2));
    const std::vector<S> dout = ToStorage<S>(RandomFloats(size_t(B) * T * C, -1, 1, 3));
    // The fast backward gets the fast forward's out and stats, as in training.
    std::vector<S> out(size_t(B) * T * C);
    std::vector<float> stats(size_t(B) * NH * T);
    AttentionForward(out.data(), stats.data(), qkv.data(), B, T, C, NH, NKV);
    // Prefilled gradients: both versions must add to them.
    const std::vector<S> dqkv0 = ToStorage<S>(RandomFloats(qkv_size, -1, 1, 4));
    std::vector<S> dqkv_ref = dqkv0, dqkv_got = dqkv0;
    AttentionBackwardReference(dqkv_ref.data(), dout.data(), qkv.data(), out.data(), stats.data(),
                               B, T, C, NH, NKV);
    AttentionBackward(dqkv_got.data(), dout.data(), qkv.data(), out.data(), stats.data(), B, T, C,
                      NH, NKV);
    ExpectAllClose(ToFloats(dqkv_got), ToFloats(dqkv_ref), Tolerance<S>::kGradAtol,
                   Tolerance<S>::kGradRtol, Name("dqkv", shape));
  }
}

TEST(AttentionReference, StatsAreLogSumExpInDouble) {
  const int B = 2, T = 7, C = 39, NH = 3, hs = C / NH;
  const std::vector<float> qkv = RandomFloats(size_t(B) * T * 3 * C, -2, 2, 5);
  std::vector<float> out(size_t(B) * T * C), stats(size_t(B) * NH * T);
  AttentionForwardReference(out.data(), stats.data(), qkv.data(), B, T, C, NH, NH);
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
  for (const Shape& shape : {Shape{1, 5, 6, 2, 2}, Shape{2, 7, 13, 1, 1}, Shape{1, 4, 8, 4, 2}}) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    const size_t qkv_size = shape.qkv_size(), out_size = size_t(B) * T * C;
    std::vector<float> qkv = RandomFloats(qkv_size, -1, 1, 6);
    const std::vector<float> w = RandomFloats(out_size, -1, 1, 7);  // loss = sum(out * w)
    std::vector<float> out(out_size), stats(size_t(B) * NH * T);
    auto loss = [&] {
      AttentionForwardReference(out.data(), stats.data(), qkv.data(), B, T, C, NH, NKV);
      double total = 0.0;
      for (size_t i = 0; i < out_size; ++i) total += double(out[i]) * w[i];
      return total;
    };
    loss();
    std::vector<float> dqkv(qkv_size, 0.0f);
    AttentionBackwardReference(dqkv.data(), w.data(), qkv.data(), out.data(), stats.data(), B, T, C,
                               NH, NKV);
    ExpectAllClose(dqkv, NumericGradient(qkv, 1e-3f, loss), 1e-3f, 1e-2f,
                   Name("dqkv vs finite differences", shape));
  }
}

// Grouped-query attention is multi-head attention whose key/value heads are repeated
// (Hugging Face's repeat_kv): the same out, and dk/dv the sums over the repeated copies.
TEST(Attention, GroupedQueryEqualsRepeatedKeyValueHeads) {
  const int B = 2, T = 19, NH = 6, NKV = 2, hs = 8, C = NH * hs, group = NH / NKV;
  const size_t gqa_row = C + 2 * NKV * hs, mha_row = 3 * size_t(C);
  const std::vector<float> gqa = RandomFloats(size_t(B) * T * gqa_row, -1, 1, 10);
  std::vector<float> mha(size_t(B) * T * mha_row);
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    for (int i = 0; i < C; ++i) mha[r * mha_row + i] = gqa[r * gqa_row + i];
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < hs; ++i) {
        const int g = h / group;
        mha[r * mha_row + C + h * hs + i] = gqa[r * gqa_row + C + g * hs + i];
        mha[r * mha_row + 2 * C + h * hs + i] = gqa[r * gqa_row + C + NKV * hs + g * hs + i];
      }
    }
  }
  const std::vector<float> dout = RandomFloats(size_t(B) * T * C, -1, 1, 11);
  std::vector<float> out_gqa(size_t(B) * T * C), out_mha(out_gqa.size());
  std::vector<float> stats_gqa(size_t(B) * NH * T), stats_mha(stats_gqa.size());
  AttentionForward(out_gqa.data(), stats_gqa.data(), gqa.data(), B, T, C, NH, NKV);
  AttentionForward(out_mha.data(), stats_mha.data(), mha.data(), B, T, C, NH, NH);
  ExpectAllClose(out_gqa, out_mha, 0.0f, 0.0f, "out");
  std::vector<float> d_gqa(gqa.size(), 0.0f), d_mha(mha.size(), 0.0f);
  AttentionBackward(d_gqa.data(), dout.data(), gqa.data(), out_gqa.data(), stats_gqa.data(), B, T,
                    C, NH, NKV);
  AttentionBackward(d_mha.data(), dout.data(), mha.data(), out_mha.data(), stats_mha.data(), B, T,
                    C, NH, NH);
  std::vector<float> want(gqa.size(), 0.0f);
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    for (int i = 0; i < C; ++i) want[r * gqa_row + i] = d_mha[r * mha_row + i];
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < hs; ++i) {
        const int g = h / group;
        want[r * gqa_row + C + g * hs + i] += d_mha[r * mha_row + C + h * hs + i];
        want[r * gqa_row + C + NKV * hs + g * hs + i] += d_mha[r * mha_row + 2 * C + h * hs + i];
      }
    }
  }
  // The group's dk/dv are summed in another order than the per-head sums added up here.
  ExpectAllClose(d_gqa, want, 1e-6f, 1e-5f, "dqkv");
}

// One new token against the KV cache: the last row of the full forward.
TYPED_TEST(AttentionTest, DecodeIsTheLastRowOfTheForward) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    if (shape.B != 1 && shape.B != 2) continue;
    const int T = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    Shape one = shape;
    one.B = 1;
    const std::vector<S> qkv = ToStorage<S>(RandomFloats(one.qkv_size(), -1, 1, 12));
    std::vector<S> full(size_t(T) * C), ref(C), got(C);
    std::vector<float> stats(size_t(NH) * T);
    AttentionForwardReference(full.data(), stats.data(), qkv.data(), 1, T, C, NH, NKV);
    AttentionDecodeReference(ref.data(), qkv.data(), T, C, NH, NKV);
    AttentionDecode(got.data(), qkv.data(), T, C, NH, NKV);
    const std::vector<S> last(full.end() - C, full.end());
    ExpectAllClose(ToFloats(ref), ToFloats(last), Tolerance<S>::kOutAtol, Tolerance<S>::kOutRtol,
                   Name("decode reference", one));
    ExpectAllClose(ToFloats(got), ToFloats(last), Tolerance<S>::kOutAtol, Tolerance<S>::kOutRtol,
                   Name("decode", one));
  }
}

// The micro-kernel on AVX-512's 16-float vectors and on AVX2's 8-float ones (the CPU picks
// one; both run here) computes every output as the same sum in the same order: forward,
// stats and backward bit for bit, fp32 and bf16, on every shape above.
template <typename S>
void ExpectSameForBothVectorWidths() {
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    const std::vector<S> qkv = ToStorage<S>(RandomFloats(shape.qkv_size(), -1, 1, 11));
    const std::vector<S> dout = ToStorage<S>(RandomFloats(size_t(B) * T * C, -1, 1, 12));
    std::vector<S> out[2], dqkv[2];
    std::vector<float> stats[2];
    for (int k = 0; k < 2; ++k) {
      SetAttentionVectorFloatsForTesting(k == 0 ? 16 : 8);
      out[k].resize(size_t(B) * T * C);
      stats[k].resize(size_t(B) * NH * T);
      dqkv[k].assign(shape.qkv_size(), S{});
      AttentionForward(out[k].data(), stats[k].data(), qkv.data(), B, T, C, NH, NKV);
      AttentionBackward(dqkv[k].data(), dout.data(), qkv.data(), out[k].data(), stats[k].data(), B,
                        T, C, NH, NKV);
    }
    SetAttentionVectorFloatsForTesting(0);
    EXPECT_EQ(ToFloats(out[0]), ToFloats(out[1])) << Name("out", shape);
    EXPECT_EQ(stats[0], stats[1]) << Name("stats", shape);
    EXPECT_EQ(ToFloats(dqkv[0]), ToFloats(dqkv[1])) << Name("dqkv", shape);
  }
}

TEST(Attention, BothVectorWidthsGiveTheSameBits) {
  ExpectSameForBothVectorWidths<float>();
  ExpectSameForBothVectorWidths<bf16>();
}

TEST(Attention, FastBackwardDoesNotDependOnThreadCount) {
  const int B = 2, T = 33, C = 39, NH = 3;
  const size_t qkv_size = size_t(B) * T * 3 * C;
  const std::vector<float> qkv = RandomFloats(qkv_size, -1, 1, 8);
  const std::vector<float> dout = RandomFloats(size_t(B) * T * C, -1, 1, 9);
  std::vector<float> out(size_t(B) * T * C), stats(size_t(B) * NH * T);
  AttentionForward(out.data(), stats.data(), qkv.data(), B, T, C, NH, NH);
  std::vector<float> one(qkv_size, 0.0f), three(qkv_size, 0.0f);
  omp_set_num_threads(1);
  AttentionBackward(one.data(), dout.data(), qkv.data(), out.data(), stats.data(), B, T, C, NH, NH);
  omp_set_num_threads(3);
  AttentionBackward(three.data(), dout.data(), qkv.data(), out.data(), stats.data(), B, T, C, NH,
                    NH);
  EXPECT_EQ(one, three);
}

}  // namespace
}  // namespace strata::cpu
