// A timeline trace of one rank: spans on named tracks (one per stream, per NVMe request
// slot, per CPU optimizer worker), instants (step boundaries, prefetch deviations) and
// counters (bytes in flight), written as Chrome trace-event JSON that Perfetto and
// chrome://tracing open ({"traceEvents": [...]}: "X" complete events, "i" instants, "C"
// counters, "M" track names; times in microseconds since the trace began).
//
// A trace records only while it is on (the steps of train.trace_steps) and at most
// `max_events` events: past the bound it stops recording and the file says so in its
// "otherData" ("truncated": true, and how many were dropped), so a long run never grows
// an unbounded file. Off (recording() false) a call costs one relaxed atomic load.
//
// Spans on one track must not overlap: the producers keep it so (a stream runs one task
// at a time; an NVMe request holds its slot until it completes); `Write` does not reorder
// them into validity.
// Thread-safety: every method is thread-safe (spans come from stream workers, I/O threads
// and the optimizer's pool at once).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

struct TraceOptions {
  int rank = 0;                     // the process id ("pid") of every event
  uint64_t max_events = 1'000'000;  // then the trace stops recording, saying so
  // This rank's clock reads that much ahead, as a machine's clock that disagrees with the
  // others' would: simulated nodes share one clock, so the tests of the alignment inject
  // it (STRATA_FAULT_TRACE_CLOCK, session/faults.h). 0 everywhere else.
  int64_t clock_skew_ns = 0;
};

class Trace {
 public:
  using Clock = std::chrono::steady_clock;
  // A span's or counter's arguments: shown in the viewer's details (bytes, unit, file).
  using Args = std::vector<std::pair<std::string, std::string>>;

  explicit Trace(TraceOptions options = {});
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // The track named `name` (created on first use, in the order tracks are shown).
  int Track(const std::string& name);

  // Recording on or off (the engine turns it on for the traced steps).
  void SetRecording(bool on) { recording_.store(on, std::memory_order_relaxed); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  // A span [begin, end) on `track`; `category` groups spans in the viewer ("compute",
  // "stall", "comm", "copy", "nvme", "adam").
  void Span(int track, const std::string& name, const std::string& category,
            Clock::time_point begin, Clock::time_point end, Args args = {});
  // The same, recorded whether or not the trace records now: for producers that learn a
  // span's times only later (CUDA events resolved after the step) and checked that the
  // trace recorded when the span began.
  void LateSpan(int track, const std::string& name, const std::string& category,
                Clock::time_point begin, Clock::time_point end, Args args = {});
  // A moment on `track` (a step boundary, a prefetch deviation).
  void Instant(int track, const std::string& name, Clock::time_point at, Args args = {});
  // A counter's value from `at` on (e.g. "nvme in flight" = 3).
  void Counter(const std::string& name, Clock::time_point at, double value);

  // Now on this trace's clock (nanoseconds since it began, skew included): what the ranks
  // compare to align their traces (collectives/clock_sync.h).
  int64_t Now() const { return Since(Clock::now()); }
  // This trace's clock minus the reference's (rank 0's), as measured at start-up: written
  // times are shifted by it, so every rank's file is on rank 0's timeline, and the offset
  // is in "otherData" ("clock_offset_us").
  void SetClockOffset(int64_t offset_ns) { clock_offset_ns_.store(offset_ns); }

  uint64_t events() const;   // recorded so far
  uint64_t dropped() const;  // past max_events

  // The trace as Chrome trace-event JSON.
  std::string ToJson() const;
  // Written to `path` (through a temporary file, renamed into place).
  Status Write(const std::string& path) const;

 private:
  struct Event {
    char phase;  // 'X', 'i', 'C'
    int track;
    std::string name;
    std::string category;
    int64_t begin_ns;
    int64_t duration_ns;
    double value;
    Args args;
  };
  bool Admit();  // under mutex_: room for one more event?
  int64_t Since(Clock::time_point t) const;

  const TraceOptions options_;
  const Clock::time_point start_;
  std::atomic<bool> recording_{false};
  std::atomic<int64_t> clock_offset_ns_{0};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<std::string> tracks_;
  std::map<std::string, int> track_ids_;
  uint64_t dropped_ = 0;
};

// One trace of several ranks' (each a Trace::ToJson, in rank order; each rank's events keep
// its rank as process id, so a viewer shows a process per rank on one timeline): their
// events concatenated, "otherData" holding each rank's under "ranks". Errors name the rank
// whose text is not a trace of strata (not JSON, no traceEvents, another rank's pid).
StatusOr<std::string> MergeTraces(const std::vector<std::string>& rank_traces);

// What a stream's spans are called (see Stream::SetTraceLabel in device/device.h).
struct TraceLabel {
  std::string name;      // "forward h3", "all-gather"
  std::string category;  // "compute", "comm", "copy", "adam"
  Trace::Args args;      // bytes, units
};

}  // namespace strata
