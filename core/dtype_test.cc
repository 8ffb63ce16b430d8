// bf16 conversion: round-to-nearest-even, exact for representable values, NaN kept.
#include "core/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

TEST(Bf16, ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f}) EXPECT_EQ(ToFloat(ToBf16(v)), v);
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(ToFloat(ToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties go to 1+2^-6 (even).
  EXPECT_EQ(ToFloat(ToBf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // Relative error is at most 2^-9 for normal values.
  for (float v = 0.001f; v < 1000.0f; v *= 1.37f) {
    EXPECT_LE(std::fabs(ToFloat(ToBf16(v)) - v), std::ldexp(v, -8)) << v;
  }
}

TEST(Bf16, NanStaysNan) { EXPECT_TRUE(std::isnan(ToFloat(ToBf16(std::nanf(""))))); }

TEST(DType, ParseRejectsUnknown) {
  EXPECT_THAT(ParseDType("bf16"), testing::IsOkAndHolds(DType::kBF16));
  EXPECT_FALSE(ParseDType("fp16").ok());
}

}  // namespace
}  // namespace strata
