// The timeline trace of real training steps (`strata train --trace`): a ZeRO-Infinity run
// (stage 3, optimizer and params on NVMe, two ranks as threads) traced for steps 2:3.
// Checked: the JSON parses; only the asked-for steps are there; spans on one track never
// overlap (streams, NVMe request slots); each track the runtime promises is present (compute
// forward/backward per unit, comm collectives with bytes, copy, CPU Adam chunks, NVMe
// reads/writes with bytes and file, counters); and the compute stream's "wait" spans of a
// step add up to that step's compute_stall_ms within 1 ms. Also the per-rank file names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "session/ranks.h"
#include "session/session.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

struct RankTrace {
  nlohmann::json trace;
  std::map<int, double> stall_ms;  // compute_stall_ms of each step (1-based)
};

// Steps 1..4 of a 2-rank ZeRO-Infinity run, traced 2:3; each rank's trace and stalls.
std::vector<RankTrace> TracedRun(const std::string& family) {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/trace-" + family;
  std::filesystem::create_directories(dir);
  auto parsed = ParseOptions(
      "", {"model.preset=" + std::string(family == "llama" ? "llama-tiny" : "tiny"),
           "train.micro_batch=2", "train.seq_len=16", "train.steps=4", "train.eval_every=0",
           "device.threads=1", "zero.world=2", "zero.stage=3", "zero.optimizer_tier=nvme",
           "zero.param_tier=nvme", "zero.nvme_dir=" + dir, "zero.nvme_allow_memory_fs=true",
           "train.trace_steps=2:3"});
  EXPECT_OK(parsed);
  const Options options = std::move(parsed).value();
  std::vector<RankTrace> ranks(2);
  std::mutex mutex;
  const Status status = RunRanks(options, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator, true));
    RankTrace mine;
    for (int step = 0; step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(const StepReport report, session->Step(step));
      mine.stall_ms[step + 1] = report.result.compute_stall_ms;
    }
    RETURN_IF_ERROR(session->Finish());
    mine.trace = nlohmann::json::parse(session->trace()->ToJson());
    std::lock_guard<std::mutex> lock(mutex);
    ranks[communicator.rank()] = std::move(mine);
    return absl::OkStatus();
  });
  EXPECT_OK(status);
  return ranks;
}

std::map<int, std::string> TrackNames(const nlohmann::json& trace) {
  std::map<int, std::string> names;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      names[event["tid"]] = event["args"]["name"];
    }
  }
  return names;
}

void CheckRank(const RankTrace& rank, int rank_id) {
  SCOPED_TRACE("rank " + std::to_string(rank_id));
  const nlohmann::json& trace = rank.trace;
  EXPECT_EQ(trace["otherData"]["rank"], rank_id);
  EXPECT_EQ(trace["otherData"]["truncated"], false);
  const auto names = TrackNames(trace);
  std::map<std::string, std::vector<nlohmann::json>> spans;  // by track name
  std::set<std::string> counters;
  for (const auto& event : trace["traceEvents"]) {
    EXPECT_EQ(event["pid"], rank_id);
    if (event["ph"] == "X") spans[names.at(event["tid"])].push_back(event);
    if (event["ph"] == "C") counters.insert(event["name"]);
  }

  // Only steps 2 and 3, each a span on "steps".
  ASSERT_EQ(spans["steps"].size(), 2u);
  EXPECT_EQ(spans["steps"][0]["name"], "step 2");
  EXPECT_EQ(spans["steps"][1]["name"], "step 3");

  // No two spans of one track overlap (1 ns of rounding allowed).
  for (auto& [track, list] : spans) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return static_cast<double>(a["ts"]) < static_cast<double>(b["ts"]);
    });
    for (size_t i = 1; i < list.size(); ++i) {
      const double end = static_cast<double>(list[i - 1]["ts"]) +
                         static_cast<double>(list[i - 1]["dur"]);
      EXPECT_GE(static_cast<double>(list[i]["ts"]), end - 0.001)
          << track << ": " << list[i - 1]["name"] << " overlaps " << list[i]["name"];
    }
  }

  // What each track shows.
  auto has = [&](const std::string& track, const std::string& prefix) {
    for (const auto& span : spans[track]) {
      if (std::string(span["name"]).rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("compute", "forward "));
  EXPECT_TRUE(has("compute", "backward "));
  EXPECT_TRUE(has("comm", "all_gather"));
  EXPECT_TRUE(has("comm", "reduce_scatter"));
  EXPECT_TRUE(has("copy", "copy up "));
  EXPECT_TRUE(has("cpu-optimizer", "adam "));
  EXPECT_TRUE(has("compute", "wait"));  // stage 3: compute waits for its gathers
  int param_gathers = 0;  // all-gathers of a unit's params (others: the loss, grad norms)
  for (const auto& span : spans["comm"]) {
    if (span["name"] != "all_gather") continue;
    EXPECT_GT(std::stoll(std::string(span["args"].at("bytes"))), 0);
    const std::string purpose = span["args"].value("for", "");
    if (purpose.rfind("gather ", 0) == 0) ++param_gathers;
  }
  EXPECT_GT(param_gathers, 0);
  int nvme_reads = 0, nvme_writes = 0;
  for (const auto& [track, list] : spans) {
    if (track.rfind("nvme ", 0) != 0) continue;
    EXPECT_THAT(track, HasSubstr(" slot "));
    for (const auto& span : list) {
      EXPECT_EQ(span["cat"], "nvme");
      EXPECT_GT(std::stoll(std::string(span["args"].at("bytes"))), 0);
      EXPECT_THAT(std::string(span["args"].at("file")), HasSubstr(".swap"));
      (span["name"] == "read" ? nvme_reads : nvme_writes) += 1;
    }
  }
  EXPECT_GT(nvme_reads, 0);
  EXPECT_GT(nvme_writes, 0);
  EXPECT_TRUE(counters.count("nvme optimizer in flight"));
  EXPECT_TRUE(counters.count("nvme params in flight"));
  EXPECT_TRUE(counters.count("device tier bytes"));  // gathers come and go every step
  EXPECT_TRUE(counters.count("host tier bytes"));

  // The compute stream's waits within each step = its compute_stall_ms, within 1 ms.
  for (const auto& step : spans["steps"]) {
    const double begin = step["ts"], end = begin + static_cast<double>(step["dur"]);
    const int number = std::stoi(std::string(step["name"]).substr(5));
    double waited_us = 0;
    for (const auto& span : spans["compute"]) {
      const double at = span["ts"];
      if (span["name"] == "wait" && at >= begin && at <= end) waited_us += double(span["dur"]);
    }
    EXPECT_NEAR(waited_us / 1000.0, rank.stall_ms.at(number), 1.0) << "step " << number;
  }
}

TEST(TraceOfTraining, ZeroInfinityTwoRanksGpt) {
  const std::vector<RankTrace> ranks = TracedRun("gpt");
  for (int r = 0; r < 2; ++r) CheckRank(ranks[r], r);
}

TEST(TraceOfTraining, ZeroInfinityTwoRanksLlama) {
  const std::vector<RankTrace> ranks = TracedRun("llama");
  for (int r = 0; r < 2; ++r) CheckRank(ranks[r], r);
}

TEST(TraceOfTraining, OneFilePerRank) {
  EXPECT_EQ(TracePathOfRank("out/t.json", 0, 1), "out/t.json");
  EXPECT_EQ(TracePathOfRank("out/t.json", 1, 4), "out/t.rank1.json");
  EXPECT_EQ(TracePathOfRank("out/t.json", 0, 2), "out/t.rank0.json");
  EXPECT_EQ(TracePathOfRank("trace", 3, 4), "trace.rank3");
}

}  // namespace
}  // namespace strata
