// `strata report`: one self-contained HTML page from a run's JSONL metrics (and optionally
// its --trace file): loss (train and validation), the step time split (forward, backward,
// exposed optimizer, the rest) with the compute stall, peak memory per tier, NVMe rates,
// and from a trace the per-step overlap of every stream and tier. The plots are Chart.js
// (Debian's libjs-chart.js), inlined into the page with the data, so it opens with no
// network. The parts are pure functions, tested on their own (report_test); the page is
// rendered headless by tests/report_render_test.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// The largest metrics or trace file `strata report` reads.
inline constexpr uint64_t kReportInputLimit = 4ull << 30;

// The step records of a metrics file (`strata train --metrics`), in file order. Errors name
// the file and line (bad JSON, a line that is not an object, a record without "step", a
// field that is neither a number, null nor an object). Both readers take their file
// through core/input_file.h (a regular file of at most kReportInputLimit bytes).
// Records written by a resumed run that repeat a step replace the earlier ones.
StatusOr<std::vector<nlohmann::json>> ReadMetrics(const std::string& path);

// The trace file of `strata train --trace`, parsed. Errors name the file.
StatusOr<nlohmann::json> ReadTrace(const std::string& path);

// One traced step of one rank: its wall time and what each track group did during it.
struct StepOverlap {
  std::string name;          // "step 2"
  int rank = 0;              // the trace's process id (a merged trace holds every rank)
  double step_ms = 0;
  double compute_busy_ms = 0;  // compute spans other than waits
  double compute_wait_ms = 0;  // compute's "wait" spans: the stall
  double comm_ms = 0;          // the comm stream's busy time (waits excluded)
  double copy_ms = 0;
  double adam_ms = 0;          // the CPU optimizer's track
  double nvme_ms = 0;          // time with at least one NVMe request in flight (any tier)
};

// Per traced step (the spans of the "steps" track) and rank (process id), each track's
// busy time clipped to the step, in step order, ranks in order within a step. Errors: not
// a trace of strata (no traceEvents, no steps track).
StatusOr<std::vector<StepOverlap>> SummarizeTrace(const nlohmann::json& trace);

// Across ranks (a merged trace): the rank whose compute is busiest per traced step, on
// average, when it is more than 20% above the median rank's ("rank 2 is the straggler:
// ..."), else that the ranks are within 20% of each other; empty for one rank.
std::string DescribeStragglers(const std::vector<StepOverlap>& overlap);

// The page: `chart_js` is the Chart.js source inlined; `title` heads it. With several ranks
// in `overlap`, the overlap plot and table show the lowest rank, and a table of every
// rank's steps with DescribeStragglers's verdict follows.
std::string RenderReport(const std::string& title, const std::vector<nlohmann::json>& metrics,
                         const std::optional<std::vector<StepOverlap>>& overlap,
                         const std::string& chart_js);

// The Chart.js file (Debian: /usr/share/javascript/chart.js/chart.min.js; the environment
// variable STRATA_CHART_JS overrides), or NotFound saying which package installs it.
StatusOr<std::string> LoadChartJs();

}  // namespace strata
