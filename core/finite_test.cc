// FirstNonFinite: the first NaN or infinity of fp32 and bf16 values, wherever it sits in a
// block (the first, the last, past a block without one); none in finite values, however
// large or small (max, denormals, -0).
#include "core/finite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace strata {
namespace {

TEST(FirstNonFinite, FindsTheFirstNanOrInfinity) {
  const float kInf = std::numeric_limits<float>::infinity();
  for (const float bad : {std::nanf(""), kInf, -kInf, -std::nanf("")}) {
    for (const size_t at : {size_t{0}, size_t{1023}, size_t{1024}, size_t{2999}}) {
      std::vector<float> values(3000, 1.5f);
      values[at] = bad;
      values.back() = bad;  // a later one does not matter
      EXPECT_EQ(FirstNonFinite(values.data(), values.size()), at) << bad << " at " << at;
      std::vector<bf16> narrow(values.size());
      for (size_t i = 0; i < values.size(); ++i) narrow[i] = ToBf16(values[i]);
      EXPECT_EQ(FirstNonFinite(narrow.data(), narrow.size()), at) << bad << " at " << at;
    }
  }
  EXPECT_EQ(NonFiniteName(std::nanf("")), "NaN");
  EXPECT_EQ(NonFiniteName(-kInf), "-inf");
}

TEST(FirstNonFinite, FiniteValuesHaveNone) {
  const std::vector<float> values = {std::numeric_limits<float>::max(),
                                     -std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::denorm_min(), -0.0f, 0.0f};
  EXPECT_EQ(FirstNonFinite(values.data(), values.size()), values.size());
  std::vector<bf16> narrow;  // bf16's largest is about 3.39e38 (FLT_MAX rounds to inf)
  for (const float v : {3.3e38f, -3.3e38f, 1e-40f, -0.0f}) narrow.push_back(ToBf16(v));
  EXPECT_EQ(FirstNonFinite(narrow.data(), narrow.size()), narrow.size());
  EXPECT_EQ(FirstNonFinite(values.data(), 0), 0u);
}

}  // namespace
}  // namespace strata
