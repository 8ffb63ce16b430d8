// Layernorm CPU kernels: fast vs reference elementwise (out, mean, rstd; dinp, dweight,
// dbias accumulated onto prefilled buffers) for float and bf16 at odd N and C on an odd
// thread count; the reference forward against statistics computed in double; the
// reference backward against central finite differences of the reference forward.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   float forward: out atol 1e-5, rtol 1e-5; mean, rstd atol 1e-6, rtol 1e-5 (the fast
//     version sums in 16 lanes, the reference in order).
//   float backward: atol 1e-4, rtol 1e-4 (dweight/dbias also reassociate across threads).
//   bf16 (forward and backward): atol 1e-4, rtol 8e-3 (fp32 results a few ulp apart may
//     round to adjacent bf16 values, one bf16 ulp is at most 2^-7 relative).
//   finite differences (fp32 forward, eps 1e-3, loss sum(out * w) summed in double):
//     atol 1e-3, rtol 1e-2.
#include "kernels/cpu/layernorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

template <typename T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr float kOutAtol = 1e-5f, kOutRtol = 1e-5f;
  static constexpr float kGradAtol = 1e-4f, kGradRtol = 1e-4f;
};
template <>
struct Tolerance<bf16> {
  static constexpr float kOutAtol = 1e-4f, kOutRtol = 8e-3f;
  static constexpr float kGradAtol = 1e-4f, kGradRtol = 8e-3f;
};

struct Shape {
  int N, C;
};
const Shape kShapes[] = {{1, 13}, {7, 67}, {33, 13}, {33, 67}, {5, 259}};

std::string Name(const char* what, const Shape& shape) {
  return std::string(what) + " N=" + std::to_string(shape.N) + " C=" + std::to_string(shape.C);
}

template <typename T>
class LayerNormTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(LayerNormTest, StorageTypes);

TYPED_TEST(LayerNormTest, ForwardMatchesReference) {
  using T = TypeParam;
  for (const Shape& shape : kShapes) {
    const int N = shape.N, C = shape.C;
    // An offset mean checks that the variance is taken around the mean.
    const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, 1.0f, 4.0f, 1));
    const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 2));
    const std::vector<T> bias = ToStorage<T>(RandomFloats(C, -0.5f, 0.5f, 3));
    std::vector<T> out_ref(size_t(N) * C), out_got(size_t(N) * C);
    std::vector<float> mean_ref(N), rstd_ref(N), mean_got(N), rstd_got(N);
    LayerNormForwardReference(out_ref.data(), mean_ref.data(), rstd_ref.data(), inp.data(),
                              weight.data(), bias.data(), N, C);
    LayerNormForward(out_got.data(), mean_got.data(), rstd_got.data(), inp.data(), weight.data(),
                     bias.data(), N, C);
    ExpectAllClose(ToFloats(out_got), ToFloats(out_ref), Tolerance<T>::kOutAtol,
                   Tolerance<T>::kOutRtol, Name("out", shape));
    ExpectAllClose(mean_got, mean_ref, 1e-6f, 1e-5f, Name("mean", shape));
    ExpectAllClose(rstd_got, rstd_ref, 1e-6f, 1e-5f, Name("rstd", shape));
  }
}

TYPED_TEST(LayerNormTest, BackwardMatchesReferenceAndAccumulates) {
  using T = TypeParam;
  for (const Shape& shape : kShapes) {
    const int N = shape.N, C = shape.C;
    const size_t NC = size_t(N) * C;
    const std::vector<T> inp = ToStorage<T>(RandomFloats(NC, -2.0f, 2.0f, 4));
    const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 5));
    const std::vector<T> bias = ToStorage<T>(RandomFloats(C, -0.5f, 0.5f, 6));
    const std::vector<T> dout = ToStorage<T>(RandomFloats(NC, -1.0f, 1.0f, 7));
    std::vector<T> out(NC);
    std::vector<float> mean(N), rstd(N);
    LayerNormForwardReference(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                              bias.data(), N, C);
    // Prefilled gradient buffers: both versions must add to them.
    const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(NC, -1.0f, 1.0f, 8));
    const std::vector<T> dweight0 = ToStorage<T>(RandomFloats(C, -1.0f, 1.0f, 9));
    const std::vector<T> dbias0 = ToStorage<T>(RandomFloats(C, -1.0f, 1.0f, 10));
    std::vector<T> dinp_ref = dinp0, dweight_ref = dweight0, dbias_ref = dbias0;
    std::vector<T> dinp_got = dinp0, dweight_got = dweight0, dbias_got = dbias0;
    LayerNormBackwardReference(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), dout.data(),
                               inp.data(), weight.data(), mean.data(), rstd.data(), N, C);
    LayerNormBackward(dinp_got.data(), dweight_got.data(), dbias_got.data(), dout.data(),
                      inp.data(), weight.data(), mean.data(), rstd.data(), N, C);
    const float atol = Tolerance<T>::kGradAtol, rtol = Tolerance<T>::kGradRtol;
    ExpectAllClose(ToFloats(dinp_got), ToFloats(dinp_ref), atol, rtol, Name("dinp", shape));
    ExpectAllClose(ToFloats(dweight_got), ToFloats(dweight_ref), atol, rtol,
                   Name("dweight", shape));
    ExpectAllClose(ToFloats(dbias_got), ToFloats(dbias_ref), atol, rtol, Name("dbias", shape));

    // dbias is independent of the normalisation: prefill + column sums of dout.
    std::vector<float> dbias_expected(C);
    for (int i = 0; i < C; ++i) {
      double sum = Load(&dbias0[i]);
      for (int n = 0; n < N; ++n) sum += Load(&dout[size_t(n) * C + i]);
      dbias_expected[i] = static_cast<float>(sum);
    }
    ExpectAllClose(ToFloats(dbias_ref), dbias_expected, atol, rtol, Name("dbias sum", shape));
  }
}

TEST(LayerNormReference, StatisticsMatchDouble) {
  const int N = 7, C = 67;
  const std::vector<float> inp = RandomFloats(size_t(N) * C, -3.0f, 5.0f, 11);
  const std::vector<float> weight(C, 1.0f), bias(C, 0.0f);
  std::vector<float> out(size_t(N) * C), mean(N), rstd(N);
  LayerNormForwardReference(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                            bias.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double sum = 0.0, squares = 0.0;
    for (int i = 0; i < C; ++i) sum += inp[size_t(n) * C + i];
    const double m = sum / C;
    for (int i = 0; i < C; ++i)
      squares += (inp[size_t(n) * C + i] - m) * (inp[size_t(n) * C + i] - m);
    const double s = 1.0 / std::sqrt(squares / C + 1e-5);
    EXPECT_NEAR(mean[n], m, 1e-5);
    EXPECT_NEAR(rstd[n], s, 1e-5 * s);
    for (int i = 0; i < C; ++i) {
      EXPECT_NEAR(out[size_t(n) * C + i], (inp[size_t(n) * C + i] - m) * s, 1e-5);
    }
  }
}

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  const int N = 3, C = 13;
  const size_t NC = size_t(N) * C;
  std::vector<float> inp = RandomFloats(NC, -2.0f, 2.0f, 12);
  std::vector<float> weight = RandomFloats(C, 0.5f, 1.5f, 13);
  std::vector<float> bias = RandomFloats(C, -0.5f, 0.5f, 14);
  const std::vector<float> w = RandomFloats(NC, -1.0f, 1.0f, 15);  // loss = sum(out * w)
  auto loss = [&] {
    std::vector<float> out(NC), mean(N), rstd(N);
    LayerNormForwardReference(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                              bias.data(), N, C);
    double total = 0.0;
    for (size_t i = 0; i < NC; ++i) total += static_cast<double>(out[i]) * w[i];
    return total;
  };
  std::vector<float> out(NC), mean(N), rstd(N);
  LayerNormForwardReference(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                            bias.data(), N, C);
  std::vector<float> dinp(NC, 0.0f), dweight(C, 0.0f), dbias(C, 0.0f);
  LayerNormBackwardReference(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(),
                             weight.data(), mean.data(), rstd.data(), N, C);
  const float eps = 1e-3f;
  ExpectAllClose(dinp, NumericGradient(inp, eps, loss), 1e-3f, 1e-2f, "dinp vs finite differences");
  ExpectAllClose(dweight, NumericGradient(weight, eps, loss), 1e-3f, 1e-2f,
                 "dweight vs finite differences");
  ExpectAllClose(dbias, NumericGradient(bias, eps, loss), 1e-3f, 1e-2f,
                 "dbias vs finite differences");
}

TEST(LayerNorm, FastBackwardIsDeterministicForAThreadCount) {
  const int N = 33, C = 67;
  const size_t NC = size_t(N) * C;
  const std::vector<float> inp = RandomFloats(NC, -2.0f, 2.0f, 16);
  const std::vector<float> weight = RandomFloats(C, 0.5f, 1.5f, 17);
  const std::vector<float> dout = RandomFloats(NC, -1.0f, 1.0f, 18);
  std::vector<float> out(NC), mean(N), rstd(N);
  LayerNormForwardReference(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                            weight.data(), N, C);
  omp_set_num_threads(3);
  std::vector<float> first(C, 0.0f), second(C, 0.0f), dinp(NC), dbias(C);
  for (std::vector<float>* dweight : {&first, &second}) {
    LayerNormBackward(dinp.data(), dweight->data(), dbias.data(), dout.data(), inp.data(),
                      weight.data(), mean.data(), rstd.data(), N, C);
  }
  EXPECT_EQ(first, second);
}

}  // namespace
}  // namespace strata::cpu
