// Warmup + cosine schedule: values at the ends and the midpoint.
#include "runtime/lr_schedule.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(LearningRate, WarmupThenCosine) {
  TrainOptions train;
  train.lr = 1.0f;
  train.min_lr_fraction = 0.1f;
  train.warmup_steps = 4;
  train.steps = 14;
  EXPECT_FLOAT_EQ(LearningRate(train, 0), 0.25f);
  EXPECT_FLOAT_EQ(LearningRate(train, 3), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(train, 4), 1.0f);    // first decay step: the peak
  EXPECT_NEAR(LearningRate(train, 13), 0.1f, 1e-6);  // last step: the floor
  // Halfway through the 10 decay steps (progress 0.5 lies between 8 and 9).
  EXPECT_NEAR(LearningRate(train, 8), 0.1f + 0.9f * 0.5f * (1 + std::cos(M_PI * 4 / 9)), 1e-6);
}

TEST(LearningRate, NoWarmup) {
  TrainOptions train;
  train.lr = 2.0f;
  train.warmup_steps = 0;
  train.steps = 10;
  EXPECT_FLOAT_EQ(LearningRate(train, 0), 2.0f);
}

}  // namespace
}  // namespace strata
