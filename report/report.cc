// See report.h.
#include "report/report.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/input_file.h"

namespace strata {
namespace {

// Total length of the union of [begin, end) intervals.
double UnionLength(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, reach = -1e300;
  for (const auto& [begin, end] : intervals) {
    if (end <= reach) continue;
    total += end - std::max(begin, reach);
    reach = end;
  }
  return total;
}

std::string HtmlEscape(const std::string& text) {
  return absl::StrReplaceAll(text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}});
}

// The page's script: the data, then one chart per canvas. Charts that have no data are
// left out (their panel says so); document.body.dataset.charts counts those drawn.
constexpr const char* kScript = R"JS(
const M = DATA.metrics, O = DATA.overlap;
const steps = M.map(r => r.step);
const has = k => M.some(r => r[k] !== undefined && r[k] !== null);
const col = k => M.map(r => (r[k] === undefined ? null : r[k]));
const pick = f => M.map(r => { try { const v = f(r); return v === undefined ? null : v; } catch (e) { return null; } });
let drawn = 0;
function chart(id, config) {
  const canvas = document.getElementById(id);
  config.options = Object.assign({animation: false, responsive: false}, config.options || {});
  new Chart(canvas, config);
  canvas.dataset.drawn = '1';
  drawn++;
}
function missing(id, why) {
  const p = document.createElement('p');
  p.className = 'missing';
  p.textContent = why;
  document.getElementById(id).replaceWith(p);
}
const xStep = {x: {type: 'linear', title: {display: true, text: 'step'}}};
// 1. Loss.
const lossSets = [{label: 'train loss', data: M.map(r => ({x: r.step, y: r.loss})),
                   borderColor: '#4e79a7', pointRadius: 0, borderWidth: 1.5}];
if (has('val_loss')) {
  lossSets.push({label: 'validation loss', data: M.filter(r => r.val_loss !== undefined)
                 .map(r => ({x: r.step, y: r.val_loss})), borderColor: '#e15759', showLine: true});
}
chart('loss', {type: 'line', data: {datasets: lossSets}, options: {scales: xStep}});
// 2. Step time split.
const f = col('forward_ms'), b = col('backward_ms'), o = col('optimizer_exposed_ms');
const rest = M.map((r, i) => Math.max(0, r.ms_per_step - (f[i] || 0) - (b[i] || 0) - (o[i] || 0)));
chart('time', {type: 'bar', data: {labels: steps, datasets: [
    {label: 'forward', data: f, backgroundColor: '#4e79a7', stack: 's'},
    {label: 'backward', data: b, backgroundColor: '#2f4b7c', stack: 's'},
    {label: 'optimizer (exposed)', data: o, backgroundColor: '#b07aa1', stack: 's'},
    {label: 'other', data: rest, backgroundColor: '#bab0ac', stack: 's'},
    {label: 'compute stall', data: col('compute_stall_ms'), type: 'line',
     borderColor: '#e15759', pointRadius: 0}]},
  options: {scales: {x: {stacked: true, title: {display: true, text: 'step'}},
                     y: {stacked: true, title: {display: true, text: 'ms'}}}}});
// 3. Peak memory per tier.
const MiB = v => (v === null ? null : v / 1048576);
chart('memory', {type: 'line', data: {labels: steps, datasets: [
    {label: 'device peak', data: pick(r => MiB(r.peak_bytes.device)), borderColor: '#4e79a7'},
    {label: 'host peak (pinned with CUDA)', data: pick(r => MiB(r.peak_bytes.host)),
     borderColor: '#59a14f'}]},
  options: {scales: {y: {title: {display: true, text: 'MiB'}}}}});
// 4. NVMe rates.
if (M.some(r => r.nvme_bytes && (r.nvme_bytes.read > 0 || r.nvme_bytes.written > 0))) {
  const rate = k => pick(r => r.nvme_bytes[k] / 1e3 / r.ms_per_step);
  chart('nvme', {type: 'line', data: {labels: steps, datasets: [
      {label: 'read MB/s', data: rate('read'), borderColor: '#76b7b2'},
      {label: 'written MB/s', data: rate('written'), borderColor: '#f28e2b'}]},
    options: {scales: {y: {title: {display: true, text: 'MB/s (bytes per step time)'}}}}});
} else {
  missing('nvme', 'No NVMe traffic in this run (nothing placed on NVMe).');
}
// 5. Overlap, from a trace.
if (O && O.length) {
  const pct = k => O.map(s => 100 * s[k] / s.step_ms);
  chart('overlap', {type: 'bar', data: {labels: O.map(s => s.name), datasets: [
      {label: 'compute busy', data: pct('compute_busy_ms'), backgroundColor: '#4e79a7'},
      {label: 'compute stalled', data: pct('compute_wait_ms'), backgroundColor: '#e15759'},
      {label: 'comm', data: pct('comm_ms'), backgroundColor: '#f28e2b'},
      {label: 'copy', data: pct('copy_ms'), backgroundColor: '#59a14f'},
      {label: 'CPU Adam', data: pct('adam_ms'), backgroundColor: '#b07aa1'},
      {label: 'NVMe in flight', data: pct('nvme_ms'), backgroundColor: '#76b7b2'}]},
    options: {scales: {y: {max: 100, title: {display: true, text: '% of the step'}}}}});
} else {
  missing('overlap', 'No trace given (strata report ... --trace FILE.json).');
}
document.body.dataset.charts = String(drawn);
)JS";

StatusOr<std::vector<StepOverlap>> SummarizeTraceEvents(const nlohmann::json& trace);

// The number `key` of a metrics record, or `fallback` where it is absent, null or an object
// (ReadMetrics lets those through; value(key, fallback) would throw on a null).
double NumberOr(const nlohmann::json& record, const char* key, double fallback) {
  const auto found = record.find(key);
  return found != record.end() && found->is_number() ? found->get<double>() : fallback;
}

}  // namespace

StatusOr<std::vector<nlohmann::json>> ReadMetrics(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   ReadInputFile(path, "report: metrics file", kReportInputLimit));
  std::vector<nlohmann::json> records;
  std::map<int64_t, size_t> index_of_step;
  size_t begin = 0;
  for (int number = 1; begin < text.size(); ++number) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    const std::string where = absl::StrCat("report: ", path, " line ", number);
    if (record.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is not JSON (a metrics file of "
                                                            "strata train --metrics?)"));
    }
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer() ||
        !record.contains("loss") || !record.contains("ms_per_step")) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is not a step record (an object with step, loss and ms_per_step)"));
    }
    // The page reads these as numbers: a field of another type is named here, not met there.
    for (const auto& [key, value] : record.items()) {
      if (!value.is_number() && !value.is_null() && !value.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": \"", key, "\" is ", value.type_name(), ", expected a number"));
      }
    }
    const int64_t step = record["step"];
    const auto seen = index_of_step.find(step);
    if (seen != index_of_step.end()) {
      records[seen->second] = std::move(record);  // a resumed run redid this step
    } else {
      index_of_step[step] = records.size();
      records.push_back(std::move(record));
    }
  }
  if (records.empty()) return absl::InvalidArgumentError(absl::StrCat("report: ", path, " has no step records"));
  std::stable_sort(records.begin(), records.end(),
                   [](const auto& a, const auto& b) { return a["step"] < b["step"]; });
  return records;
}

StatusOr<nlohmann::json> ReadTrace(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   ReadInputFile(path, "report: trace file", kReportInputLimit));
  nlohmann::json trace = nlohmann::json::parse(text, nullptr, false);
  if (trace.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("report: ", path, " is not JSON"));
  }
  return trace;
}

StatusOr<std::vector<StepOverlap>> SummarizeTrace(const nlohmann::json& trace) {
  // A field of the wrong type (a string "ts") throws in nlohmann's accessors: it is turned
  // into an error here, as every parser of outside input returns Status.
  try {
    return SummarizeTraceEvents(trace);
  } catch (const nlohmann::json::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("report: the trace has a field of the wrong type (", error.what(), ")"));
  }
}

namespace {

// An event's "tid" where it is a JSON integer, else -1 (no track of strata's): a float
// tid of 1e300 would be a double cast to a type it does not fit (undefined behaviour).
int64_t TrackId(const nlohmann::json& event) {
  const auto tid = event.find("tid");
  return tid != event.end() && tid->is_number_integer() ? tid->get<int64_t>() : -1;
}

// An event's "pid" where it is a JSON integer, else 0 (a trace of one rank).
int64_t ProcessId(const nlohmann::json& event) {
  const auto pid = event.find("pid");
  return pid != event.end() && pid->is_number_integer() ? pid->get<int64_t>() : 0;
}

// The number of a step span's name ("step 12" -> 12; -1 for another name).
int64_t StepNumber(const std::string& name) {
  int64_t number = -1;
  if (name.rfind("step ", 0) != 0 || !absl::SimpleAtoi(name.substr(5), &number)) return -1;
  return number;
}

StatusOr<std::vector<StepOverlap>> SummarizeTraceEvents(const nlohmann::json& trace) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    return absl::InvalidArgumentError("report: the trace has no traceEvents (not a trace file)");
  }
  // Tracks are per process (a merged trace holds every rank's).
  std::map<std::pair<int64_t, int64_t>, std::string> names;
  for (const auto& event : trace["traceEvents"]) {
    if (event.value("ph", "") == "M" && event.value("name", "") == "thread_name") {
      // value(), not operator[]: a const json's operator[] on a missing key is an assertion.
      names[{ProcessId(event), TrackId(event)}] =
          event.value("args", nlohmann::json::object()).value("name", "");
    }
  }
  struct Span {
    int64_t rank;
    std::string track, name;
    double begin, end;  // us
  };
  std::vector<Span> spans, steps;
  for (const auto& event : trace["traceEvents"]) {
    if (event.value("ph", "") != "X") continue;
    const double begin = event.value("ts", 0.0);
    const int64_t rank = ProcessId(event);
    Span span{rank, names[{rank, TrackId(event)}], event.value("name", ""), begin,
              begin + event.value("dur", 0.0)};
    (span.track == "steps" ? steps : spans).push_back(std::move(span));
  }
  if (steps.empty()) {
    return absl::InvalidArgumentError(
        "report: the trace has no step spans (not from strata train --trace, or no traced step)");
  }
  // Step order (rank 0's timeline: the ranks' clocks are aligned), ranks in order.
  std::map<int64_t, double> first_begin;  // step name's number -> its earliest begin
  for (const Span& step : steps) {
    auto [it, added] = first_begin.emplace(StepNumber(step.name), step.begin);
    if (!added) it->second = std::min(it->second, step.begin);
  }
  std::sort(steps.begin(), steps.end(), [&](const Span& a, const Span& b) {
    const double ta = first_begin[StepNumber(a.name)], tb = first_begin[StepNumber(b.name)];
    return ta != tb ? ta < tb : a.rank < b.rank;
  });
  std::vector<StepOverlap> out;
  for (const Span& step : steps) {
    StepOverlap o;
    o.name = step.name;
    o.rank = static_cast<int>(std::clamp<int64_t>(step.rank, 0, 1 << 30));
    o.step_ms = (step.end - step.begin) / 1000.0;
    std::vector<std::pair<double, double>> nvme;
    for (const Span& span : spans) {
      if (span.rank != step.rank) continue;
      const double begin = std::max(span.begin, step.begin), end = std::min(span.end, step.end);
      if (end <= begin) continue;
      const double ms = (end - begin) / 1000.0;
      const bool wait = span.name == "wait";
      if (span.track == "compute") (wait ? o.compute_wait_ms : o.compute_busy_ms) += ms;
      if (wait) continue;
      if (span.track == "comm") o.comm_ms += ms;
      if (span.track == "copy") o.copy_ms += ms;
      if (span.track == "cpu-optimizer") o.adam_ms += ms;
      if (span.track.rfind("nvme ", 0) == 0) nvme.emplace_back(begin, end);
    }
    o.nvme_ms = UnionLength(std::move(nvme)) / 1000.0;
    out.push_back(o);
  }
  return out;
}

}  // namespace

std::string DescribeStragglers(const std::vector<StepOverlap>& overlap) {
  std::map<int, std::pair<double, int>> busy;  // rank -> (sum of compute busy ms, steps)
  for (const StepOverlap& o : overlap) {
    busy[o.rank].first += o.compute_busy_ms;
    busy[o.rank].second += 1;
  }
  if (busy.size() < 2) return "";
  std::vector<std::pair<double, int>> mean;  // (ms per step, rank)
  for (const auto& [rank, sum] : busy) mean.emplace_back(sum.first / sum.second, rank);
  std::sort(mean.begin(), mean.end());
  // The median rank (the lower middle: with two ranks, the faster one).
  const double median = mean[(mean.size() - 1) / 2].first;
  const auto [slowest_ms, slowest] = mean.back();
  if (median <= 0 || slowest_ms <= 1.2 * median) {
    return absl::StrFormat("No straggler: every rank's compute is within 20%% of the median "
                           "rank's (%.1f ms per traced step; the busiest, rank %d, %.1f ms).",
                           median, slowest, slowest_ms);
  }
  return absl::StrFormat("Rank %d is the straggler: its compute is busy %.1f ms per traced "
                         "step, %.0f%% more than the median rank's %.1f ms; the other ranks "
                         "wait for it at every collective.",
                         slowest, slowest_ms, 100 * (slowest_ms / median - 1), median);
}

std::string RenderReport(const std::string& title, const std::vector<nlohmann::json>& metrics,
                         const std::optional<std::vector<StepOverlap>>& all_ranks,
                         const std::string& chart_js) {
  // The overlap plot and table: the lowest rank's steps; the ranks' table: all of them.
  std::optional<std::vector<StepOverlap>> overlap;
  bool several_ranks = false;
  if (all_ranks) {
    int lowest = INT32_MAX;
    for (const StepOverlap& o : *all_ranks) lowest = std::min(lowest, o.rank);
    overlap.emplace();
    for (const StepOverlap& o : *all_ranks) {
      if (o.rank == lowest) overlap->push_back(o);
      else several_ranks = true;
    }
  }
  nlohmann::json data = {{"metrics", metrics}, {"overlap", nullptr}};
  if (overlap) {
    nlohmann::json list = nlohmann::json::array();
    for (const StepOverlap& o : *overlap) {
      list.push_back({{"name", o.name}, {"step_ms", o.step_ms},
                      {"compute_busy_ms", o.compute_busy_ms}, {"compute_wait_ms", o.compute_wait_ms},
                      {"comm_ms", o.comm_ms}, {"copy_ms", o.copy_ms}, {"adam_ms", o.adam_ms},
                      {"nvme_ms", o.nvme_ms}});
    }
    data["overlap"] = std::move(list);
  }
  // Inside <script>, "</" would end it early.
  const std::string data_js = absl::StrReplaceAll(data.dump(), {{"</", "<\\/"}});
  // The summary line.
  std::vector<double> ms;
  for (const auto& r : metrics) ms.push_back(NumberOr(r, "ms_per_step", 0.0));
  std::sort(ms.begin(), ms.end());
  const nlohmann::json& last = metrics.back();
  std::string summary = absl::StrCat(metrics.size(), " steps (", metrics.front()["step"].dump(),
                                     " to ", last["step"].dump(), "); last loss ",
                                     absl::StrFormat("%.4f", NumberOr(last, "loss", 0.0)));
  for (auto it = metrics.rbegin(); it != metrics.rend(); ++it) {
    const auto val_loss = it->find("val_loss");
    if (val_loss != it->end() && val_loss->is_number()) {
      absl::StrAppend(&summary, ", last validation loss ",
                      absl::StrFormat("%.4f", val_loss->get<double>()), " (step ",
                      (*it)["step"].dump(), ")");
      break;
    }
  }
  absl::StrAppend(&summary, "; median ", absl::StrFormat("%.1f", ms[ms.size() / 2]), " ms/step");
  std::string overlap_table;
  if (overlap) {
    overlap_table = "<table><tr><th>step</th><th>ms</th><th>compute busy</th><th>compute "
                    "stalled</th><th>comm</th><th>copy</th><th>CPU Adam</th><th>NVMe in "
                    "flight</th></tr>";
    for (const StepOverlap& o : *overlap) {
      auto cell = [&](double v) { return absl::StrFormat("<td>%.1f (%.0f%%)</td>", v, 100 * v / o.step_ms); };
      absl::StrAppend(&overlap_table, "<tr><td>", HtmlEscape(o.name), "</td>",
                      absl::StrFormat("<td>%.1f</td>", o.step_ms), cell(o.compute_busy_ms),
                      cell(o.compute_wait_ms), cell(o.comm_ms), cell(o.copy_ms), cell(o.adam_ms),
                      cell(o.nvme_ms), "</tr>");
    }
    absl::StrAppend(&overlap_table, "</table><p class=\"note\">Milliseconds of each step (and "
                    "its share) a track was busy; streams run at once, so shares add up to more "
                    "than 100% where they overlap. Compute stalled = the compute stream waiting "
                    "for another stream: the time overlap did not hide.</p>");
  }
  std::string ranks_section;
  if (several_ranks) {
    ranks_section = absl::StrCat(
        "<section><h2>Ranks (from the merged trace)</h2><p id=\"stragglers\">",
        HtmlEscape(DescribeStragglers(*all_ranks)),
        "</p><table><tr><th>step</th><th>rank</th><th>ms</th><th>compute busy</th>"
        "<th>compute stalled</th><th>comm</th></tr>");
    for (const StepOverlap& o : *all_ranks) {
      absl::StrAppend(&ranks_section, "<tr><td>", HtmlEscape(o.name), "</td>",
                      absl::StrFormat("<td>%d</td><td>%.1f</td><td>%.1f</td><td>%.1f</td>"
                                      "<td>%.1f</td></tr>",
                                      o.rank, o.step_ms, o.compute_busy_ms, o.compute_wait_ms,
                                      o.comm_ms));
    }
    absl::StrAppend(&ranks_section, "</table><p class=\"note\">Milliseconds of each traced "
                    "step per rank, on rank 0's clock (the ranks' clocks are aligned at "
                    "start-up). A rank whose compute is busier than the others' is the one "
                    "they wait for (their compute stalls, their collectives take longer).</p>"
                    "</section>");
  }
  auto panel = [](const char* id, const char* heading) {
    return absl::StrCat("<section><h2>", heading, "</h2><canvas id=\"", id,
                        "\" width=\"900\" height=\"300\"></canvas></section>");
  };
  return absl::StrCat(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>", HtmlEscape(title),
      "</title><style>body{font-family:sans-serif;margin:20px;max-width:960px}"
      "h2{font-size:16px;margin:24px 0 6px}table{border-collapse:collapse;font-size:12px}"
      "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
      ".note,.missing{color:#555;font-size:12px}</style></head><body>\n<h1>",
      HtmlEscape(title), "</h1><p>", HtmlEscape(summary), "</p>\n",
      panel("loss", "Loss"), panel("time", "Step time: forward, backward, exposed optimizer, other; compute stall"),
      panel("memory", "Peak memory per tier"), panel("nvme", "NVMe traffic"),
      panel("overlap", several_ranks ? "Overlap per traced step (from the trace; rank 0)"
                                     : "Overlap per traced step (from the trace)"),
      overlap_table, ranks_section,
      "\n<script>\n", chart_js, "\n</script>\n<script>\nconst DATA = ", data_js, ";\n", kScript,
      "</script>\n</body></html>\n");
}

StatusOr<std::string> LoadChartJs() {
  const char* override_path = std::getenv("STRATA_CHART_JS");
  const std::string path =
      override_path != nullptr ? override_path : "/usr/share/javascript/chart.js/chart.min.js";
  StatusOr<std::string> text = ReadInputFile(path, "Chart.js", kReportInputLimit);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "report: Chart.js is not at ", path, " (", text.status().message(),
        "); install Debian's libjs-chart.js (tools/install_deps.sh does) or point "
        "STRATA_CHART_JS at chart.min.js"));
  }
  return text;
}

}  // namespace strata
