// Tests of rank agreement over the local communicator (threads as ranks): identical
// configurations agree and share rank 0's run id; different ones fail on every rank with
// the same message naming each differing key and the ranks' values; rank-local keys may
// differ; texts of different lengths cannot break the exchange; stop signals are agreed
// on by rank order.
#include "session/rank_agreement.h"

#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collectives/local_communicator.h"
#include "config/options_parse.h"
#include "core/run_identity.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Resolved(const std::vector<std::string>& sets) {
  StatusOr<Options> options = ParseOptions("", sets);
  EXPECT_TRUE(options.ok()) << options.status();
  return FormatResolved(*options);
}

// Runs AgreeOnStart on world_size threads, rank r with texts[r].
std::vector<Status> RunStart(const std::vector<std::string>& texts) {
  auto group = CreateLocalGroup(static_cast<int>(texts.size()), LocalGroupOptions{});
  EXPECT_TRUE(group.ok());
  std::vector<Status> results(texts.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < texts.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = AgreeOnStart(*(*group)[r], texts[r]); });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

TEST(RankAgreement, SameConfigurationsAgreeAndRankLocalKeysMayDiffer) {
  const std::string base = Resolved({"model.preset=tiny", "train.steps=7"});
  const std::string local = Resolved({"model.preset=tiny", "train.steps=7",
                                      "zero.nvme_dir=/other/disk", "device.threads=3"});
  SetRunId("abc123def456");
  for (const Status& status : RunStart({base, local, base})) EXPECT_OK(status);
  EXPECT_EQ(RunId(), "abc123def456");  // rank 0's (all threads share the process id)
}

TEST(RankAgreement, DifferentConfigurationsFailOnEveryRankNamingKeysAndRanks) {
  const std::string base = Resolved({"model.preset=tiny", "train.steps=7"});
  const std::string steps = Resolved({"model.preset=tiny", "train.steps=9"});
  const std::string stage =
      Resolved({"model.preset=tiny", "train.steps=7", "zero.stage=2", "train.seed=5"});
  const std::vector<Status> results = RunStart({base, steps, stage, base});
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("different configurations"),
                               HasSubstr("train.steps: ranks 0,2,3 7; rank 1 9"),
                               HasSubstr("zero.stage: "), HasSubstr("rank 2 2"),
                               HasSubstr("train.seed: "), HasSubstr("rank 2 5"),
                               Not(HasSubstr("model.layers")))))
        << "rank " << r;
    EXPECT_EQ(results[r].message(), results[0].message());
  }
}

TEST(RankAgreement, TextsOfAnyLengthAreExchangedSafely) {
  const std::string base = Resolved({"model.preset=tiny"});
  const std::string longer =
      Resolved({"model.preset=tiny", "data.path=/" + std::string(5000, 'x') + ".txt"});
  const std::vector<Status> results = RunStart({longer, base});
  for (const Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr("data.path: "), HasSubstr("rank 1 (empty)"), HasSubstr("xxx..."))));
  }
}

TEST(RankAgreement, StopIsTheFirstSignalInRankOrder) {
  auto group = CreateLocalGroup(3, LocalGroupOptions{});
  ASSERT_OK(group);
  const std::vector<int> signals = {0, SIGTERM, SIGINT};
  std::vector<int> agreed(3, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      StatusOr<int> stop = AgreeOnStop(*(*group)[r], signals[r]);
      agreed[r] = stop.ok() ? *stop : -2;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(agreed, (std::vector<int>{SIGTERM, SIGTERM, SIGTERM}));
}

}  // namespace
}  // namespace strata
