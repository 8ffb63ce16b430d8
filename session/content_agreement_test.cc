// Tests the content agreement among ranks (threads here, as under mpirun): the same
// identities pass; one rank with another identity, or one that cannot read an input, is an
// error on every rank naming the input, each group of ranks with its host, and the paths;
// train.resume resolves to the newest step; the node layout line groups ranks by host.
#include "session/content_agreement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "collectives/local_communicator.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

// Runs AgreeOnContent on `claims.size()` ranks as threads; returns each rank's status.
std::vector<Status> Agree(const std::vector<std::vector<ContentClaim>>& claims,
                          const std::vector<std::string>& hosts) {
  const int world = static_cast<int>(claims.size());
  auto group = CreateLocalGroup(world, LocalGroupOptions{});
  EXPECT_OK(group.status());
  std::vector<Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] = AgreeOnContent(*(*group)[r], claims[r], hosts).status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

TEST(AgreeOnContent, TheSameIdentitiesPass) {
  const ContentClaim data{"data.path", "/d/train.bin", 42, ""};
  for (const Status& status : Agree({{data}, {data}, {data}}, {"a", "a", "b"})) {
    EXPECT_OK(status);
  }
}

TEST(AgreeOnContent, AnotherIdentityIsNamedWithItsHostOnEveryRank) {
  const ContentClaim model{"model.from", "/m", 7, ""};
  const ContentClaim data{"data.path", "/d/train.bin", 42, ""};
  ContentClaim other = data;
  other.identity = 43;
  for (const Status& status : Agree({{model, data}, {model, data}, {model, other}},
                                    {"node-a", "node-a", "node-b"})) {
    EXPECT_THAT(status,
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("data.path is not the same on every rank"),
                               HasSubstr("ranks 0,1 on node-a: /d/train.bin (identity "
                                         "000000000000002a)"),
                               HasSubstr("rank 2 on node-b: /d/train.bin (identity "
                                         "000000000000002b)"),
                               ::testing::Not(HasSubstr("model.from")))));
  }
}

TEST(AgreeOnContent, ARankThatCannotReadAnInputIsNamed) {
  const ContentClaim resume{"train.resume", "/ck/step-20", 9, ""};
  const ContentClaim missing{"train.resume", "/ck", 0, "checkpoint: no checkpoint at /ck"};
  for (const Status& status : Agree({{resume}, {missing}}, {"node-a", "node-b"})) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 AllOf(HasSubstr("train.resume is not the same"),
                                       HasSubstr("rank 1 on node-b: /ck (checkpoint: no "
                                                 "checkpoint at /ck)"))));
  }
  // No rank can read it: not this check's business (its reader says why, on every rank).
  for (const Status& status : Agree({{missing}, {missing}}, {"a", "b"})) EXPECT_OK(status);
}

TEST(ContentClaims, ResumeResolvesToTheNewestStepAndHashesItsMetadata) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : "/tmp") / "claims";
  fs::remove_all(dir);
  for (const char* step : {"step-10", "step-20"}) {
    fs::create_directories(dir / "ck" / step);
    std::ofstream(dir / "ck" / step / "checkpoint.json") << "{\"" << step << "\": 1}";
  }
  std::ofstream(dir / "train.txt") << "text";
  Options options;
  options.train.resume = (dir / "ck").string();
  options.data.path = (dir / "train.txt").string();
  options.model.from = "hf:" + (dir / "missing").string();
  const std::vector<ContentClaim> claims = ContentClaims(options);
  ASSERT_EQ(claims.size(), 3u);
  EXPECT_EQ(claims[0].what, "train.resume");
  EXPECT_EQ(claims[0].path, (dir / "ck" / "step-20").string());
  EXPECT_NE(claims[0].identity, 0u);
  EXPECT_EQ(claims[1].what, "data.path");
  EXPECT_NE(claims[1].identity, 0u);
  EXPECT_EQ(claims[2].what, "model.from");
  EXPECT_EQ(claims[2].identity, 0u);
  EXPECT_THAT(claims[2].problem, HasSubstr("missing"));
}

TEST(DescribeNodeLayout, GroupsRanksByHost) {
  EXPECT_EQ(DescribeNodeLayout({"a", "a", "a"}), "1 node: a (ranks 0-2)");
  EXPECT_EQ(DescribeNodeLayout({"a", "a", "b", "b"}), "2 nodes: a (ranks 0-1), b (ranks 2-3)");
  EXPECT_EQ(DescribeNodeLayout({"a", "b", "a"}), "2 nodes: a (ranks 0,2), b (rank 1)");
}

}  // namespace
}  // namespace strata
