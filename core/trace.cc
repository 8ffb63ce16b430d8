// See trace.h.
#include "core/trace.h"

#include "core/atomic_file.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace strata {

Trace::Trace(TraceOptions options) : options_(options), start_(Clock::now()) {}

int Trace::Track(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = track_ids_.find(name);
  if (found != track_ids_.end()) return found->second;
  const int id = static_cast<int>(tracks_.size());
  tracks_.push_back(name);
  track_ids_[name] = id;
  return id;
}

int64_t Trace::Since(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count() +
         options_.clock_skew_ns;
}

bool Trace::Admit() {
  if (events_.size() < options_.max_events) return true;
  ++dropped_;
  return false;
}

void Trace::Span(int track, const std::string& name, const std::string& category,
                 Clock::time_point begin, Clock::time_point end, Args args) {
  if (!recording()) return;
  const int64_t begin_ns = Since(begin);
  const int64_t duration_ns = std::max<int64_t>(0, Since(end) - begin_ns);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!Admit()) return;
  events_.push_back({'X', track, name, category, begin_ns, duration_ns, 0.0, std::move(args)});
}

void Trace::LateSpan(int track, const std::string& name, const std::string& category,
                     Clock::time_point begin, Clock::time_point end, Args args) {
  const int64_t begin_ns = Since(begin);
  const int64_t duration_ns = std::max<int64_t>(0, Since(end) - begin_ns);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!Admit()) return;
  events_.push_back({'X', track, name, category, begin_ns, duration_ns, 0.0, std::move(args)});
}

void Trace::Instant(int track, const std::string& name, Clock::time_point at, Args args) {
  if (!recording()) return;
  const int64_t at_ns = Since(at);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!Admit()) return;
  events_.push_back({'i', track, name, "", at_ns, 0, 0.0, std::move(args)});
}

void Trace::Counter(const std::string& name, Clock::time_point at, double value) {
  if (!recording()) return;
  const int64_t at_ns = Since(at);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!Admit()) return;
  events_.push_back({'C', 0, name, "", at_ns, 0, value, {}});
}

uint64_t Trace::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

uint64_t Trace::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::string Trace::ToJson() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json list = nlohmann::json::array();
  const int pid = options_.rank;
  const int64_t offset_ns = clock_offset_ns_.load();
  list.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"},
                  {"args", {{"name", absl::StrCat("rank ", pid)}}}});
  for (size_t t = 0; t < tracks_.size(); ++t) {
    list.push_back({{"ph", "M"}, {"pid", pid}, {"tid", t}, {"name", "thread_name"},
                    {"args", {{"name", tracks_[t]}}}});
    list.push_back({{"ph", "M"}, {"pid", pid}, {"tid", t}, {"name", "thread_sort_index"},
                    {"args", {{"sort_index", t}}}});
  }
  // In time order (producers record when work ends, so the list is not).
  std::vector<const Event*> order;
  order.reserve(events_.size());
  for (const Event& event : events_) order.push_back(&event);
  std::stable_sort(order.begin(), order.end(),
                   [](const Event* a, const Event* b) { return a->begin_ns < b->begin_ns; });
  for (const Event* event : order) {
    nlohmann::json item = {{"ph", std::string(1, event->phase)}, {"pid", pid},
                           {"name", event->name}, {"ts", (event->begin_ns - offset_ns) / 1000.0}};
    if (event->phase == 'C') {
      item["args"] = {{"value", event->value}};
      list.push_back(std::move(item));
      continue;
    }
    item["tid"] = event->track;
    if (event->phase == 'X') {
      item["dur"] = event->duration_ns / 1000.0;
      item["cat"] = event->category;
    } else {
      item["s"] = "t";  // an instant on its track
    }
    if (!event->args.empty()) {
      nlohmann::json args = nlohmann::json::object();
      for (const auto& [key, value] : event->args) args[key] = value;
      item["args"] = std::move(args);
    }
    list.push_back(std::move(item));
  }
  nlohmann::json other = {{"rank", pid},
                          {"events", events_.size()},
                          {"max_events", options_.max_events},
                          {"truncated", dropped_ > 0},
                          {"dropped_events", dropped_},
                          {"clock_offset_us", offset_ns / 1000.0}};
  nlohmann::json root = {{"traceEvents", std::move(list)},
                         {"displayTimeUnit", "ms"},
                         {"otherData", std::move(other)}};
  return root.dump();
}

Status Trace::Write(const std::string& path) const {
  return Annotate(WriteFileAtomically(path, ToJson()), "trace");
}

StatusOr<std::string> MergeTraces(const std::vector<std::string>& rank_traces) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < rank_traces.size(); ++r) {
    nlohmann::json one = nlohmann::json::parse(rank_traces[r], nullptr, false);
    if (one.is_discarded() || !one.is_object() || !one.contains("traceEvents") ||
        !one["traceEvents"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("merging traces: rank ", r, "'s is not a strata trace (no traceEvents)"));
    }
    for (nlohmann::json& event : one["traceEvents"]) {
      if (!event.is_object() || !event.contains("pid") || event["pid"] != static_cast<int>(r)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "merging traces: rank ", r, "'s trace holds an event of another process: ",
            event.dump().substr(0, 120)));
      }
      events.push_back(std::move(event));
    }
    ranks.push_back(one.contains("otherData") ? one["otherData"] : nlohmann::json::object());
  }
  nlohmann::json root = {{"traceEvents", std::move(events)},
                         {"displayTimeUnit", "ms"},
                         {"otherData", {{"merged", true}, {"ranks", std::move(ranks)}}}};
  return root.dump();
}

}  // namespace strata
