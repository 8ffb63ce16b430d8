// Tests the trace recorder: what the JSON holds (tracks named, spans with microsecond
// times and arguments, instants, counters, in time order), that nothing is recorded while
// off, and that the size bound stops recording and says so.
#include "core/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace strata {
namespace {

using std::chrono::microseconds;

// Events of phase `phase` in a parsed trace.
std::vector<nlohmann::json> OfPhase(const nlohmann::json& trace, const std::string& phase) {
  std::vector<nlohmann::json> out;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == phase) out.push_back(event);
  }
  return out;
}

TEST(TraceTest, SpansInstantsCountersAndTrackNames) {
  Trace trace({.rank = 3, .max_events = 100});
  const int compute = trace.Track("compute");
  const int comm = trace.Track("comm");
  EXPECT_EQ(trace.Track("compute"), compute);  // one track per name
  EXPECT_NE(compute, comm);
  trace.SetRecording(true);
  const auto t0 = Trace::Clock::now();
  // Recorded out of time order: the file is sorted.
  trace.Span(comm, "all-gather", "comm", t0 + microseconds(500), t0 + microseconds(1500),
             {{"bytes", "4096"}});
  trace.Span(compute, "forward h0", "compute", t0 + microseconds(100), t0 + microseconds(900));
  trace.Instant(compute, "step 1", t0 + microseconds(50));
  trace.Counter("nvme in flight", t0 + microseconds(700), 3);
  EXPECT_EQ(trace.events(), 4u);

  const nlohmann::json parsed = nlohmann::json::parse(trace.ToJson());
  EXPECT_EQ(parsed["otherData"]["truncated"], false);
  EXPECT_EQ(parsed["otherData"]["rank"], 3);
  std::map<int, std::string> names;
  for (const auto& meta : OfPhase(parsed, "M")) {
    EXPECT_EQ(meta["pid"], 3);
    if (meta["name"] == "thread_name") names[meta["tid"]] = meta["args"]["name"];
  }
  EXPECT_EQ(names[compute], "compute");
  EXPECT_EQ(names[comm], "comm");
  const auto spans = OfPhase(parsed, "X");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["name"], "forward h0");  // sorted by start
  EXPECT_EQ(spans[0]["tid"], compute);
  const double start0 = spans[0]["ts"], start1 = spans[1]["ts"];
  EXPECT_NEAR(start1 - start0, 400.0, 0.01);
  EXPECT_NEAR(static_cast<double>(spans[0]["dur"]), 800.0, 0.01);
  EXPECT_NEAR(static_cast<double>(spans[1]["dur"]), 1000.0, 0.01);
  EXPECT_EQ(spans[1]["cat"], "comm");
  EXPECT_EQ(spans[1]["args"]["bytes"], "4096");
  const auto instants = OfPhase(parsed, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["name"], "step 1");
  EXPECT_NEAR(start0 - static_cast<double>(instants[0]["ts"]), 50.0, 0.01);
  const auto counters = OfPhase(parsed, "C");
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0]["args"]["value"], 3.0);
}

TEST(TraceTest, NothingWhileOff) {
  Trace trace;
  const int track = trace.Track("compute");
  const auto t0 = Trace::Clock::now();
  trace.Span(track, "x", "compute", t0, t0 + microseconds(5));
  trace.SetRecording(true);
  trace.Span(track, "scoped", "compute", t0, t0 + microseconds(5));
  trace.SetRecording(false);
  trace.Instant(track, "late", t0);
  EXPECT_EQ(trace.events(), 1u);
  const auto spans = OfPhase(nlohmann::json::parse(trace.ToJson()), "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0]["name"], "scoped");
}

TEST(TraceTest, BoundedAndSaysSo) {
  Trace trace({.rank = 0, .max_events = 10});
  const int track = trace.Track("compute");
  trace.SetRecording(true);
  const auto t0 = Trace::Clock::now();
  for (int i = 0; i < 25; ++i) {
    trace.Span(track, "s", "compute", t0 + microseconds(i * 10), t0 + microseconds(i * 10 + 5));
  }
  EXPECT_EQ(trace.events(), 10u);
  EXPECT_EQ(trace.dropped(), 15u);
  const nlohmann::json parsed = nlohmann::json::parse(trace.ToJson());
  EXPECT_EQ(parsed["otherData"]["truncated"], true);
  EXPECT_EQ(parsed["otherData"]["dropped_events"], 15);
  EXPECT_EQ(OfPhase(parsed, "X").size(), 10u);
}

TEST(TraceTest, WritesTheFileWhole) {
  Trace trace;
  trace.SetRecording(true);
  trace.Instant(trace.Track("compute"), "step 1", Trace::Clock::now());
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/trace.json";
  ASSERT_TRUE(trace.Write(path).ok());
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_EQ(text.str(), trace.ToJson());
  EXPECT_FALSE(std::ifstream(path + ".partial").good());
  const Status bad = trace.Write("/nonexistent-dir/trace.json");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.message()).find("/nonexistent-dir/trace.json"), std::string::npos);
}

TEST(TraceTest, ASkewedClockIsShiftedBackByItsMeasuredOffset) {
  // Two ranks' traces begun together; rank 1's clock reads 5 s ahead. Its offset, as the
  // ranks measure it (collectives/clock_sync.h), puts its events back on rank 0's timeline.
  Trace rank0({.rank = 0});
  Trace rank1({.rank = 1, .clock_skew_ns = 5'000'000'000});
  const int64_t offset = rank1.Now() - rank0.Now();
  EXPECT_NEAR(offset / 1e9, 5.0, 0.05);
  rank1.SetClockOffset(offset);
  const auto t0 = Trace::Clock::now();
  for (Trace* trace : {&rank0, &rank1}) {
    trace->SetRecording(true);
    trace->Span(trace->Track("compute"), "forward", "compute", t0, t0 + microseconds(100));
  }
  const auto ts = [](const Trace& trace) {
    return OfPhase(nlohmann::json::parse(trace.ToJson()), "X").at(0)["ts"].get<double>();
  };
  EXPECT_NEAR(ts(rank1), ts(rank0), 50'000.0);  // within 50 ms (the two Now() calls apart)
  EXPECT_NEAR(nlohmann::json::parse(rank1.ToJson())["otherData"]["clock_offset_us"].get<double>(),
              offset / 1000.0, 1.0);
  rank1.SetClockOffset(0);  // unaligned, the span sits 5 s later
  EXPECT_NEAR(ts(rank1) - ts(rank0), 5e6, 50'000.0);
}

TEST(TraceTest, MergedTracesKeepAProcessPerRank) {
  std::vector<std::string> texts;
  for (int r = 0; r < 3; ++r) {
    Trace trace({.rank = r});
    trace.SetRecording(true);
    const auto t0 = Trace::Clock::now();
    trace.Span(trace.Track("compute"), "forward", "compute", t0, t0 + microseconds(10 * (r + 1)));
    texts.push_back(trace.ToJson());
  }
  const StatusOr<std::string> merged = MergeTraces(texts);
  ASSERT_TRUE(merged.ok()) << merged.status();
  const nlohmann::json parsed = nlohmann::json::parse(*merged);
  const auto spans = OfPhase(parsed, "X");
  ASSERT_EQ(spans.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(spans[r]["pid"], r);
    EXPECT_DOUBLE_EQ(spans[r]["dur"].get<double>(), 10.0 * (r + 1));
  }
  int process_names = 0;
  for (const auto& meta : OfPhase(parsed, "M")) process_names += meta["name"] == "process_name";
  EXPECT_EQ(process_names, 3);
  EXPECT_EQ(parsed["otherData"]["merged"], true);
  ASSERT_EQ(parsed["otherData"]["ranks"].size(), 3u);
  EXPECT_EQ(parsed["otherData"]["ranks"][2]["rank"], 2);

  // A rank's text that is not a trace, or that holds another rank's events, is named.
  std::vector<std::string> bad = texts;
  bad[1] = "not json";
  EXPECT_NE(std::string(MergeTraces(bad).status().message()).find("rank 1's is not a strata trace"),
            std::string::npos);
  bad = texts;
  std::swap(bad[0], bad[2]);
  EXPECT_NE(std::string(MergeTraces(bad).status().message()).find("rank 0's trace holds an event of another process"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
