// Tests the report's parts: metrics files read (and refused, naming the line), a trace
// summarised per step against hand-computed busy times, and the page holding its data,
// its five canvases and Chart.js (the headless rendering is tests/report_render_test);
// null fields and malformed trace metadata the fuzzer found taken as absent.
#include "report/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::StatusIs;

std::string Write(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Report, ReadsMetricsAndKeepsTheLastOfARepeatedStep) {
  const std::string path = Write("m.jsonl",
                                 "{\"step\":1,\"loss\":5.5,\"ms_per_step\":10}\n"
                                 "\n"
                                 "{\"step\":2,\"loss\":5.0,\"ms_per_step\":11}\n"
                                 "{\"step\":2,\"loss\":4.9,\"ms_per_step\":12,\"val_loss\":5.1}\n"
                                 "{\"step\":3,\"loss\":4.5,\"ms_per_step\":9}\n");
  ASSERT_OK_AND_ASSIGN(const auto records, ReadMetrics(path));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1]["loss"], 4.9);  // the resumed run's record of step 2
  EXPECT_EQ(records[1]["val_loss"], 5.1);
  EXPECT_EQ(records[2]["step"], 3);
}

TEST(Report, RefusesWhatIsNotAMetricsFile) {
  EXPECT_THAT(ReadMetrics(Write("bad.jsonl", "{\"step\":1,\"loss\":1,\"ms_per_step\":1}\n{oops\n")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("bad.jsonl line 2"), HasSubstr("not JSON"))));
  EXPECT_THAT(ReadMetrics(Write("arr.jsonl", "[1,2]\n")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("line 1"), HasSubstr("not a step record"))));
  EXPECT_THAT(ReadMetrics(Write("empty.jsonl", "\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no step records")));
  EXPECT_THAT(ReadMetrics("/nonexistent/m.jsonl"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/m.jsonl")));
}

// A step of 1000 us with known spans (times in us).
nlohmann::json HandMadeTrace() {
  auto meta = [](int tid, const std::string& name) {
    return nlohmann::json{{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", tid},
                          {"args", {{"name", name}}}};
  };
  auto span = [](int tid, const std::string& name, double ts, double dur) {
    return nlohmann::json{{"ph", "X"}, {"pid", 0}, {"tid", tid}, {"name", name},
                          {"ts", ts}, {"dur", dur}, {"cat", "x"}};
  };
  return {{"traceEvents",
           {meta(0, "steps"), meta(1, "compute"), meta(2, "comm"), meta(3, "nvme params slot 0"),
            meta(4, "nvme optimizer slot 3"), meta(5, "cpu-optimizer"), meta(6, "copy"),
            span(0, "step 2", 1000, 1000),
            span(1, "forward a", 1000, 300), span(1, "wait", 1300, 200),
            span(1, "backward a", 1500, 400),
            span(1, "forward z", 2500, 100),      // after the step: not counted
            span(2, "all_gather", 900, 300),      // clipped: 200 inside
            span(2, "wait", 1200, 100),           // a comm wait is not comm work
            span(3, "read", 1000, 200), span(4, "write", 1100, 200),  // union 300
            span(5, "adam a", 1800, 400),         // clipped: 200
            span(6, "copy up a", 1000, 50)}}};
}

TEST(Report, SummarisesATraceStepByStep) {
  ASSERT_OK_AND_ASSIGN(const auto steps, SummarizeTrace(HandMadeTrace()));
  ASSERT_EQ(steps.size(), 1u);
  const StepOverlap& s = steps[0];
  EXPECT_EQ(s.name, "step 2");
  EXPECT_DOUBLE_EQ(s.step_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_ms, 0.7);
  EXPECT_DOUBLE_EQ(s.compute_wait_ms, 0.2);
  EXPECT_DOUBLE_EQ(s.comm_ms, 0.2);
  EXPECT_DOUBLE_EQ(s.nvme_ms, 0.3);
  EXPECT_DOUBLE_EQ(s.adam_ms, 0.2);
  EXPECT_DOUBLE_EQ(s.copy_ms, 0.05);
  EXPECT_THAT(SummarizeTrace(nlohmann::json{{"traceEvents", nlohmann::json::array()}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no step spans")));
  EXPECT_THAT(SummarizeTrace(nlohmann::json::array()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no traceEvents")));
}

TEST(Report, PageHoldsDataCanvasesAndTheLibrary) {
  std::vector<nlohmann::json> metrics = {
      {{"step", 1}, {"loss", 5.5}, {"ms_per_step", 10.0}, {"note", "</script><b>"}},
      {{"step", 2}, {"loss", 5.0}, {"ms_per_step", 12.0}, {"val_loss", 5.2}}};
  ASSERT_OK_AND_ASSIGN(const auto overlap, SummarizeTrace(HandMadeTrace()));
  const std::string page = RenderReport("run <x>", metrics, overlap, "/*CHARTJS*/");
  for (const char* id : {"loss", "time", "memory", "nvme", "overlap"}) {
    EXPECT_THAT(page, HasSubstr(absl::StrCat("<canvas id=\"", id, "\"")));
  }
  EXPECT_THAT(page, HasSubstr("/*CHARTJS*/"));
  EXPECT_THAT(page, HasSubstr("run &lt;x&gt;"));
  EXPECT_THAT(page, HasSubstr("\"val_loss\":5.2"));
  EXPECT_THAT(page, HasSubstr("<\\/script>"));  // data cannot end the script early
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_THAT(page, HasSubstr("last loss 5.0000, last validation loss 5.2000 (step 2)"));
  EXPECT_THAT(page, HasSubstr("<td>0.2 (20%)</td>"));  // the overlap table
}

// ReadMetrics lets null fields through (a step without validation may write "val_loss":
// null): the page takes them as absent instead of throwing (found by
// //fuzz:report_metrics_fuzz; its reproducer is fuzz/report_metrics/crashes/val_loss_null).
// A trace's thread without "args" names no track (fuzz/report_trace/crashes/).
TEST(Report, NullFieldsAndThreadsWithoutArgsAreAbsentNotFatal) {
  const std::vector<nlohmann::json> metrics = {
      {{"step", 1}, {"loss", 5.5}, {"ms_per_step", 10.0}, {"val_loss", 5.3}},
      {{"step", 2}, {"loss", nullptr}, {"ms_per_step", nullptr}, {"val_loss", nullptr}}};
  const std::string page = RenderReport("nulls", metrics, std::nullopt, "");
  EXPECT_THAT(page, HasSubstr("last loss 0.0000, last validation loss 5.3000 (step 1)"));
  nlohmann::json trace = HandMadeTrace();
  trace["traceEvents"].push_back({{"ph", "M"}, {"name", "thread_name"}, {"tid", 99}});
  trace["traceEvents"].push_back({{"ph", "M"}, {"name", "thread_name"}, {"tid", 1e300},
                                  {"args", {{"name", "steps"}}}});
  ASSERT_OK_AND_ASSIGN(const auto steps, SummarizeTrace(trace));
  ASSERT_OK_AND_ASSIGN(const auto expected, SummarizeTrace(HandMadeTrace()));
  EXPECT_EQ(steps.size(), expected.size());
}

// A merged trace of three ranks (process ids 0-2), two traced steps each: rank 2's compute
// takes twice as long, the others wait for it. Track ids repeat across ranks (each rank
// numbers its own), and rank 1 names its tracks in another order.
nlohmann::json ThreeRankTrace(double rank2_forward_us) {
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < 3; ++rank) {
    const int steps = rank == 1 ? 1 : 0, compute = rank == 1 ? 0 : 1;
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", steps},
                      {"args", {{"name", "steps"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", compute},
                      {"args", {{"name", "compute"}}}});
    for (int step = 0; step < 2; ++step) {
      const double begin = 10'000 * (step + 1) + rank * 3;  // aligned clocks: a few us apart
      const double forward = rank == 2 ? rank2_forward_us : 400;
      auto span = [&](int tid, const std::string& name, double ts, double dur) {
        events.push_back({{"ph", "X"}, {"pid", rank}, {"tid", tid}, {"name", name},
                          {"ts", ts}, {"dur", dur}});
      };
      span(steps, "step " + std::to_string(step + 2), begin, 1000);
      span(compute, "forward", begin, forward);
      if (forward < 800) span(compute, "wait", begin + forward, 800 - forward);
    }
  }
  return {{"traceEvents", events}};
}

TEST(Report, AMergedTraceIsSummarisedPerRankAndTheStragglerNamed) {
  ASSERT_OK_AND_ASSIGN(const auto overlap, SummarizeTrace(ThreeRankTrace(800)));
  ASSERT_EQ(overlap.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(overlap[i].name, i < 3 ? "step 2" : "step 3");
    EXPECT_EQ(overlap[i].rank, i % 3);
    EXPECT_DOUBLE_EQ(overlap[i].compute_busy_ms, i % 3 == 2 ? 0.8 : 0.4) << i;
    EXPECT_DOUBLE_EQ(overlap[i].compute_wait_ms, i % 3 == 2 ? 0.0 : 0.4) << i;
  }
  EXPECT_EQ(DescribeStragglers(overlap),
            "Rank 2 is the straggler: its compute is busy 0.8 ms per traced step, 100% more "
            "than the median rank's 0.4 ms; the other ranks wait for it at every collective.");
  const std::vector<nlohmann::json> metrics = {{{"step", 2}, {"loss", 5.0}, {"ms_per_step", 1.0}}};
  const std::string page = RenderReport("ranks", metrics, overlap, "");
  EXPECT_THAT(page, HasSubstr("Ranks (from the merged trace)"));
  EXPECT_THAT(page, HasSubstr("Rank 2 is the straggler"));
  EXPECT_THAT(page, HasSubstr("<td>step 3</td><td>2</td><td>1.0</td><td>0.8</td><td>0.0</td>"));
  EXPECT_THAT(page, HasSubstr("Overlap per traced step (from the trace; rank 0)"));

  // Within 20%: no straggler. One rank: nothing to say, and no ranks table.
  ASSERT_OK_AND_ASSIGN(const auto even, SummarizeTrace(ThreeRankTrace(470)));
  EXPECT_THAT(DescribeStragglers(even), HasSubstr("No straggler: every rank's compute is within 20%"));
  ASSERT_OK_AND_ASSIGN(const auto one, SummarizeTrace(HandMadeTrace()));
  EXPECT_EQ(DescribeStragglers(one), "");
  EXPECT_THAT(RenderReport("one", metrics, one, ""), Not(HasSubstr("Ranks (from")));
}

TEST(Report, ChartJsFromTheEnvironmentOrANamedPackage) {
  setenv("STRATA_CHART_JS", Write("chart.js", "var Chart;").c_str(), 1);
  ASSERT_OK_AND_ASSIGN(const std::string js, LoadChartJs());
  EXPECT_EQ(js, "var Chart;");
  setenv("STRATA_CHART_JS", "/nonexistent/chart.min.js", 1);
  EXPECT_THAT(LoadChartJs(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("libjs-chart.js")));
  unsetenv("STRATA_CHART_JS");
}

}  // namespace
}  // namespace strata
