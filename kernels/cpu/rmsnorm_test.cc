// RMSNorm CPU kernels: fast vs reference elementwise (out, rstd; dinp, dweight accumulated
// onto prefilled buffers) for float and bf16 at odd N and C on an odd thread count; the
// reference forward against statistics computed in double; the reference backward against
// central finite differences of the reference forward.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   float forward: out atol 1e-5, rtol 1e-5; rstd rtol 1e-5 (16 lanes vs in-order sums).
//   float backward: atol 1e-4, rtol 1e-4 (dweight also reassociates across threads).
//   bf16: atol 1e-4, rtol 8e-3 (one bf16 ulp is at most 2^-7 relative).
//   finite differences (fp32, eps 1e-3, loss sum(out * w) in double): atol 1e-3, rtol 1e-2.
#include "kernels/cpu/rmsnorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <type_traits>
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
const Shape kShapes[] = {{1, 13}, {7, 67}, {33, 13}, {5, 259}};
constexpr float kEps = 1e-6f;

std::string Name(const char* what, const Shape& shape) {
  return std::string(what) + " N=" + std::to_string(shape.N) + " C=" + std::to_string(shape.C);
}

template <typename T>
class RmsNormTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(RmsNormTest, StorageTypes);

TYPED_TEST(RmsNormTest, ForwardMatchesReference) {
  using T = TypeParam;
  for (const Shape& shape : kShapes) {
    const int N = shape.N, C = shape.C;
    const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -2.0f, 3.0f, 1));
    const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 2));
    std::vector<T> out_ref(size_t(N) * C), out_got(size_t(N) * C);
    std::vector<float> rstd_ref(N), rstd_got(N);
    RmsNormForwardReference(out_ref.data(), rstd_ref.data(), inp.data(), weight.data(), N, C,
                            kEps);
    RmsNormForward(out_got.data(), rstd_got.data(), inp.data(), weight.data(), N, C, kEps);
    ExpectAllClose(ToFloats(out_got), ToFloats(out_ref), Tolerance<T>::kOutAtol,
                   Tolerance<T>::kOutRtol, Name("out", shape));
    ExpectAllClose(rstd_got, rstd_ref, 0.0f, 1e-5f, Name("rstd", shape));
  }
}

TYPED_TEST(RmsNormTest, BackwardMatchesReferenceAndAccumulates) {
  using T = TypeParam;
  for (const Shape& shape : kShapes) {
    const int N = shape.N, C = shape.C;
    const size_t NC = size_t(N) * C;
    const std::vector<T> inp = ToStorage<T>(RandomFloats(NC, -2.0f, 2.0f, 4));
    const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 5));
    const std::vector<T> dout = ToStorage<T>(RandomFloats(NC, -1.0f, 1.0f, 7));
    std::vector<T> out(NC);
    std::vector<float> rstd(N);
    RmsNormForwardReference(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
    const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(NC, -1.0f, 1.0f, 8));
    const std::vector<T> dweight0 = ToStorage<T>(RandomFloats(C, -1.0f, 1.0f, 9));
    std::vector<T> dinp_ref = dinp0, dweight_ref = dweight0;
    std::vector<T> dinp_got = dinp0, dweight_got = dweight0;
    RmsNormBackwardReference(dinp_ref.data(), dweight_ref.data(), dout.data(), inp.data(),
                             weight.data(), rstd.data(), N, C);
    RmsNormBackward(dinp_got.data(), dweight_got.data(), dout.data(), inp.data(), weight.data(),
                    rstd.data(), N, C);
    const float atol = Tolerance<T>::kGradAtol, rtol = Tolerance<T>::kGradRtol;
    ExpectAllClose(ToFloats(dinp_got), ToFloats(dinp_ref), atol, rtol, Name("dinp", shape));
    ExpectAllClose(ToFloats(dweight_got), ToFloats(dweight_ref), atol, rtol,
                   Name("dweight", shape));
    // Accumulation (float: in bf16 the prefill-free sum is itself rounded): the gradient
    // without the prefill plus the prefill.
    if constexpr (std::is_same_v<T, bf16>) continue;
    std::vector<T> dinp_zero(NC), dweight_zero(C);
    RmsNormBackwardReference(dinp_zero.data(), dweight_zero.data(), dout.data(), inp.data(),
                             weight.data(), rstd.data(), N, C);
    std::vector<float> dweight_sum(C);
    for (int i = 0; i < C; ++i) dweight_sum[i] = Load(&dweight_zero[i]) + Load(&dweight0[i]);
    ExpectAllClose(ToFloats(dweight_ref), dweight_sum, atol, rtol, Name("prefill", shape));
  }
}

TEST(RmsNormReference, StatisticsMatchDouble) {
  const int N = 7, C = 67;
  const std::vector<float> inp = RandomFloats(size_t(N) * C, -3.0f, 5.0f, 11);
  const std::vector<float> weight = RandomFloats(C, 0.5f, 1.5f, 12);
  std::vector<float> out(size_t(N) * C), rstd(N);
  RmsNormForwardReference(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
  for (int n = 0; n < N; ++n) {
    double squares = 0.0;
    for (int i = 0; i < C; ++i) squares += double(inp[size_t(n) * C + i]) * inp[size_t(n) * C + i];
    const double s = 1.0 / std::sqrt(squares / C + kEps);
    EXPECT_NEAR(rstd[n], s, 1e-5 * s);
    for (int i = 0; i < C; ++i) {
      EXPECT_NEAR(out[size_t(n) * C + i], inp[size_t(n) * C + i] * s * weight[i], 1e-5);
    }
  }
}

TEST(RmsNormReference, BackwardMatchesFiniteDifferences) {
  const int N = 3, C = 13;
  const size_t NC = size_t(N) * C;
  std::vector<float> inp = RandomFloats(NC, -2.0f, 2.0f, 12);
  std::vector<float> weight = RandomFloats(C, 0.5f, 1.5f, 13);
  const std::vector<float> w = RandomFloats(NC, -1.0f, 1.0f, 15);  // loss = sum(out * w)
  auto loss = [&] {
    std::vector<float> out(NC), rstd(N);
    RmsNormForwardReference(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
    double total = 0.0;
    for (size_t i = 0; i < NC; ++i) total += static_cast<double>(out[i]) * w[i];
    return total;
  };
  std::vector<float> out(NC), rstd(N);
  RmsNormForwardReference(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
  std::vector<float> dinp(NC, 0.0f), dweight(C, 0.0f);
  RmsNormBackwardReference(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(),
                           rstd.data(), N, C);
  const float eps = 1e-3f;
  ExpectAllClose(dinp, NumericGradient(inp, eps, loss), 1e-3f, 1e-2f, "dinp vs finite differences");
  ExpectAllClose(dweight, NumericGradient(weight, eps, loss), 1e-3f, 1e-2f,
                 "dweight vs finite differences");
}

}  // namespace
}  // namespace strata::cpu
