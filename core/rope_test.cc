// RopeInverseFrequencies against the formulas of rope.h evaluated in double, one case per
// llama3 branch, dynamic equal to the default; CheckRopeSpec's errors name the key.
#include "core/rope.h"

#include <cmath>

#include "core/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// theta 10000, hs 8: the plain frequencies are 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63,
// 628, 6283).
double Plain(int i) { return std::pow(10000.0, -2.0 * i / 8.0); }

TEST(RopeTest, NoScalingIsThePowerOfTheta) {
  const std::vector<float> got = RopeInverseFrequencies(RopeSpec{}, 8);
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], Plain(i), 1e-6 * Plain(i)) << i;
}

TEST(RopeTest, LinearDividesEveryFrequency) {
  RopeSpec rope;
  rope.scaling = RopeScaling::kLinear;
  rope.factor = 4.0f;
  const std::vector<float> got = RopeInverseFrequencies(rope, 8);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], Plain(i) / 4, 1e-6 * Plain(i)) << i;
}

TEST(RopeTest, Llama3KeepsHighDividesLowAndMixesBetween) {
  RopeSpec rope;
  rope.scaling = RopeScaling::kLlama3;
  rope.factor = 8.0f;
  rope.low_freq_factor = 1.0f;
  rope.high_freq_factor = 4.0f;
  rope.original_max_seq_len = 128;  // wavelengths below 32 kept, above 128 divided
  const std::vector<float> got = RopeInverseFrequencies(rope, 8);
  EXPECT_NEAR(got[0], Plain(0), 1e-6);         // wavelength 6.3: kept
  const double wavelen = 2 * M_PI / Plain(1);  // 62.8: mixed
  const double smooth = (128.0 / wavelen - 1.0) / 3.0;
  ASSERT_GT(smooth, 0.3);
  ASSERT_LT(smooth, 0.4);
  const double mixed = (1 - smooth) * Plain(1) / 8 + smooth * Plain(1);
  EXPECT_NEAR(got[1], mixed, 1e-6 * mixed);
  EXPECT_NEAR(got[1], 0.0427511, 1e-6);
  EXPECT_NEAR(got[2], Plain(2) / 8, 1e-6 * Plain(2));  // 628: divided
  EXPECT_NEAR(got[3], Plain(3) / 8, 1e-6 * Plain(3));
}

// Dynamic NTK within its original context: the default frequencies, bit for bit.
TEST(RopeTest, DynamicWithinItsContextIsTheDefault) {
  RopeSpec rope;
  rope.scaling = RopeScaling::kDynamic;
  rope.factor = 2.0f;
  rope.original_max_seq_len = 4096;
  EXPECT_EQ(RopeInverseFrequencies(rope, 8), RopeInverseFrequencies(RopeSpec{}, 8));
  EXPECT_EQ(DescribeRope(rope), "theta 10000, dynamic scaling (factor 2, original 4096)");
}

TEST(RopeTest, ChecksNameTheKey) {
  RopeSpec rope;
  EXPECT_OK(CheckRopeSpec(rope));
  rope.theta = 0;
  EXPECT_THAT(CheckRopeSpec(rope),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_theta")));
  rope = RopeSpec{};
  rope.factor = -1;  // unused without a scaling
  EXPECT_OK(CheckRopeSpec(rope));
  rope.scaling = RopeScaling::kLinear;
  EXPECT_THAT(CheckRopeSpec(rope),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_factor")));
  rope = RopeSpec{};
  rope.scaling = RopeScaling::kLlama3;
  rope.high_freq_factor = 1.0f;
  EXPECT_THAT(CheckRopeSpec(rope), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("model.rope_high_freq_factor")));
  rope.high_freq_factor = 4.0f;
  rope.original_max_seq_len = 0;
  EXPECT_THAT(CheckRopeSpec(rope), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("model.rope_original_max_seq_len")));
  rope = RopeSpec{};
  rope.scaling = RopeScaling::kDynamic;
  rope.high_freq_factor = 0.5f;  // unused by dynamic
  EXPECT_OK(CheckRopeSpec(rope));
  rope.original_max_seq_len = 0;
  EXPECT_THAT(CheckRopeSpec(rope), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("model.rope_original_max_seq_len")));
  rope.original_max_seq_len = 16;
  rope.factor = 0;
  EXPECT_THAT(CheckRopeSpec(rope),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_factor")));
}

}  // namespace
}  // namespace strata
