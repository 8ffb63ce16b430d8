// End-to-end training through the session used by `strata train`: on the embedded default
// corpus a small model's loss clearly falls (the README's promise, at a smaller size), the
// validation loss is reported, peaks are accounted, and two runs with the same seed give
// bit-identical losses (fixed reduction order on one rank).
#include <gtest/gtest.h>

#include "launch/session.h"
#include "launch/options_parse.h"

namespace strata {
namespace {

Options SmallRun(int steps) {
  auto options = ParseOptions(
      "", {"model.preset=tiny", "model.channels=64", "model.layers=2", "train.micro_batch=4",
           "train.seq_len=32", "train.lr=3e-3", "train.warmup_steps=2",
           "train.steps=" + std::to_string(steps), "train.eval_every=" + std::to_string(steps),
           "device.memory_limit=256MiB"});
  EXPECT_TRUE(options.ok()) << options.status();
  return *options;
}

TEST(TrainSession, LossFallsOnDefaultCorpus) {
  Options options = SmallRun(40);
  auto session = TrainingSession::CreateSingleRank(options);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<double> losses;
  std::optional<double> val;
  for (int step = 0; step < options.train.steps; ++step) {
    auto report = (*session)->Step(step);
    ASSERT_TRUE(report.ok()) << report.status();
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
    auto session = *TrainingSession::CreateSingleRank(options);
    for (int step = 0; step < options.train.steps; ++step) {
      run.push_back((*session->Step(step)).result.loss);
    }
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(TrainSession, DeviceLimitTooSmallIsAClearError) {
  Options options = SmallRun(1);
  options.device.memory_limit = 64 << 10;
  auto session = TrainingSession::CreateSingleRank(options);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(session.status().message().find("device.memory_limit"), std::string::npos)
      << session.status();
}

TEST(TrainSession, MissingDataFileIsAClearError) {
  Options options = SmallRun(1);
  options.data.path = "/nonexistent/corpus.txt";
  auto session = TrainingSession::CreateSingleRank(options);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("/nonexistent/corpus.txt"), std::string::npos)
      << session.status();
}

}  // namespace
}  // namespace strata
