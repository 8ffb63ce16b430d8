// SwiGLU CPU kernels: fast vs reference elementwise (float and bf16, odd thread count,
// backward accumulated onto a prefilled buffer); the reference against silu(g) * u in
// double; the reference backward against central finite differences.
//
// Tolerances: float atol 1e-6, rtol 1e-5 (ExpApprox vs std::exp, relative error < 1.5e-7,
// amplified a few times by the division); bf16 atol 1e-4, rtol 8e-3 (results a few fp32 ulp
// apart may round to adjacent bf16 values); double formula atol 1e-6, rtol 1e-5; finite
// differences atol 1e-3, rtol 1e-2.
#include "kernels/cpu/swiglu.h"

#include <gtest/gtest.h>

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
  static constexpr float kAtol = 1e-6f, kRtol = 1e-5f;
};
template <>
struct Tolerance<bf16> {
  static constexpr float kAtol = 1e-4f, kRtol = 8e-3f;
};

struct Shape {
  int N, F;
};
const Shape kShapes[] = {{1, 7}, {5, 33}, {31, 17}};

std::string Name(const char* what, const Shape& s) {
  return std::string(what) + " N=" + std::to_string(s.N) + " F=" + std::to_string(s.F);
}

template <typename T>
class SwiGluTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(SwiGluTest, StorageTypes);

TYPED_TEST(SwiGluTest, FastMatchesReference) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    const size_t in = size_t(s.N) * 2 * s.F, out_n = size_t(s.N) * s.F;
    // Gates out to +-8 reach both saturated ends of the sigmoid.
    const std::vector<T> inp = ToStorage<T>(RandomFloats(in, -8.0f, 8.0f, 1));
    const std::vector<T> dout = ToStorage<T>(RandomFloats(out_n, -1.0f, 1.0f, 2));
    std::vector<T> out_ref(out_n), out_got(out_n);
    SwiGluForwardReference(out_ref.data(), inp.data(), s.N, s.F);
    SwiGluForward(out_got.data(), inp.data(), s.N, s.F);
    ExpectAllClose(ToFloats(out_got), ToFloats(out_ref), Tolerance<T>::kAtol, Tolerance<T>::kRtol,
                   Name("out", s));
    const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(in, -1.0f, 1.0f, 3));
    std::vector<T> dinp_ref = dinp0, dinp_got = dinp0;
    SwiGluBackwardReference(dinp_ref.data(), inp.data(), dout.data(), s.N, s.F);
    SwiGluBackward(dinp_got.data(), inp.data(), dout.data(), s.N, s.F);
    ExpectAllClose(ToFloats(dinp_got), ToFloats(dinp_ref), Tolerance<T>::kAtol,
                   Tolerance<T>::kRtol, Name("dinp", s));
  }
}

TEST(SwiGluReference, MatchesFormulaInDouble) {
  const int N = 3, F = 11;
  const std::vector<float> inp = RandomFloats(size_t(N) * 2 * F, -6.0f, 6.0f, 4);
  std::vector<float> out(size_t(N) * F);
  SwiGluForwardReference(out.data(), inp.data(), N, F);
  std::vector<float> want(out.size());
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < F; ++i) {
      const double g = inp[size_t(n) * 2 * F + i], u = inp[size_t(n) * 2 * F + F + i];
      want[size_t(n) * F + i] = float(g / (1.0 + std::exp(-g)) * u);
    }
  }
  ExpectAllClose(out, want, 1e-6f, 1e-5f, "silu(g) * u");
}

TEST(SwiGluReference, BackwardMatchesFiniteDifferences) {
  const int N = 2, F = 5;
  std::vector<float> inp = RandomFloats(size_t(N) * 2 * F, -3.0f, 3.0f, 5);
  const std::vector<float> w = RandomFloats(size_t(N) * F, -1.0f, 1.0f, 6);
  auto loss = [&] {
    std::vector<float> out(size_t(N) * F);
    SwiGluForwardReference(out.data(), inp.data(), N, F);
    double total = 0.0;
    for (size_t i = 0; i < out.size(); ++i) total += double(out[i]) * w[i];
    return total;
  };
  std::vector<float> dinp(inp.size(), 0.0f);
  SwiGluBackwardReference(dinp.data(), inp.data(), w.data(), N, F);
  ExpectAllClose(dinp, NumericGradient(inp, 1e-3f, loss), 1e-3f, 1e-2f,
                 "dinp vs finite differences");
}

}  // namespace
}  // namespace strata::cpu
