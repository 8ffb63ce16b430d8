// End-to-end training through the session used by `strata train`: on the embedded default
// corpus a small model's loss clearly falls (the README's promise, at a smaller size), the
// validation loss is reported, peaks are accounted, and two runs with the same seed give
// bit-identical losses (fixed reduction order on one rank).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "session/session.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// A helper returning a value cannot ASSERT: a parse failure is printed, then value() throws,
// which gtest reports as a failure of the test.

Options SmallRun(int steps) {
  auto options = ParseOptions(
      "", {"model.preset=tiny", "model.channels=64", "model.layers=2", "train.micro_batch=4",
           "train.seq_len=32", "train.lr=3e-3", "train.warmup_steps=2",
           "train.steps=" + std::to_string(steps), "train.eval_every=" + std::to_string(steps),
           "device.memory_limit=256MiB"});
  EXPECT_OK(options);
  return std::move(options).value();
}

TEST(TrainSession, LossFallsOnDefaultCorpus) {
  Options options = SmallRun(40);
  auto session = TrainingSession::CreateSingleRank(options);
  ASSERT_OK(session);
  std::vector<double> losses;
  std::optional<double> val;
  for (int step = 0; step < options.train.steps; ++step) {
    auto report = (*session)->Step(step);
    ASSERT_OK(report);
    losses.push_back(report->result.loss);
    if (report->val_loss) val = report->val_loss;
    EXPECT_GT(report->device.peak_bytes, 0u);
    EXPECT_LE(report->device.peak_bytes, options.device.memory_limit);
  }
  // Byte-level English starts near ln(256) = 5.55; 40 steps of a tiny model reach < 3.5.
  EXPECT_NEAR(losses.front(), 5.55, 0.3);
  double tail = 0;
  for (int i = 30; i < 40; ++i) tail += losses[i] / 10;
  EXPECT_LT(tail, 3.5);
  ASSERT_TRUE(val.has_value());
  EXPECT_LT(*val, 3.8);
}

TEST(TrainSession, SameSeedSameLosses) {
  Options options = SmallRun(5);
  std::vector<double> runs[2];
  for (auto& run : runs) {
    ASSERT_OK_AND_ASSIGN(auto session, TrainingSession::CreateSingleRank(options));
    for (int step = 0; step < options.train.steps; ++step) {
      ASSERT_OK_AND_ASSIGN(auto report, session->Step(step));
      run.push_back(report.result.loss);
    }
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(TrainSession, DeviceLimitTooSmallIsAClearError) {
  Options options = SmallRun(1);
  options.device.memory_limit = 64 << 10;
  EXPECT_THAT(TrainingSession::CreateSingleRank(options),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("device.memory_limit")));
}

TEST(TrainSession, MissingDataFileIsAClearError) {
  Options options = SmallRun(1);
  options.data.path = "/nonexistent/corpus.txt";
  EXPECT_THAT(TrainingSession::CreateSingleRank(options),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/corpus.txt")));
}

}  // namespace
}  // namespace strata
