// Test scaffolding shared by the kernels/cpu tests: the non-template helpers of
// kernel_test_util.h (random vectors, the elementwise closeness check, finite differences, the
// odd-thread-count fixture).
#include "kernels/cpu/kernel_test_util.h"

#include <omp.h>

#include <cmath>
#include <random>

namespace strata::cpu {
namespace {

// The check of ExpectAllClose with the limit and the difference computed in Real.
template <typename Real>
void ExpectAllCloseIn(const std::vector<float>& got, const std::vector<float>& ref, Real atol,
                      Real rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const Real limit = atol + rtol * std::fabs(ref[i]);
    if (!(std::fabs(Real(got[i]) - ref[i]) <= limit)) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", expected " << ref[i]
                      << " (limit " << limit << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << got.size();
}

}  // namespace

std::vector<float> RandomFloats(size_t n, float low, float high, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(generator);
  return values;
}

std::vector<int32_t> RandomTokens(size_t n, int vocab_size, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> distribution(0, vocab_size - 1);
  std::vector<int32_t> tokens(n);
  for (int32_t& token : tokens) token = distribution(generator);
  return tokens;
}

void ExpectAllClose(const std::vector<float>& got, const std::vector<float>& ref, float atol,
                    float rtol, const std::string& what) {
  ExpectAllCloseIn<float>(got, ref, atol, rtol, what);
}

void ExpectAllClose(const std::vector<float>& got, const std::vector<float>& ref, double atol,
                    double rtol, const std::string& what) {
  ExpectAllCloseIn<double>(got, ref, atol, rtol, what);
}

std::vector<float> NumericGradient(std::vector<float>& values, float eps,
                                   const std::function<double()>& loss) {
  std::vector<float> gradient(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double plus = loss();
    values[i] = saved - eps;
    const double minus = loss();
    values[i] = saved;
    gradient[i] = static_cast<float>((plus - minus) / (2.0 * eps));
  }
  return gradient;
}

void OddThreadCountTest::SetUp() { omp_set_num_threads(3); }

}  // namespace strata::cpu
