// A CUDA Device's streams and events (internal to //device/cuda:cuda_device: in its srcs, so
// nothing outside that library can include it; other code reaches their CUDA handles
// through cuda_native.h). CudaStream: a non-blocking cudaStream_t whose first error is
// sticky, whose host work runs on a thread of its own (host_work.h), and which times what
// the trace and the idle-time figures read: its waits on other streams' events (stalls),
// the gaps while its feeding thread blocked in the device, the spans of its trace labels.
// CudaEvent: a cudaEvent_t without timing, remembering the stream of its latest Record.
// What a caller may rely on: cuda_device.h.
// Thread-safety: as Stream and Event (device/device.h): any host thread may call them, and
// each call that reaches CUDA makes the stream's or event's GPU current first. A stream's
// sticky error is under one mutex, its timing state under another (stall_mutex_).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "device/cuda/host_work.h"
#include "device/device.h"
#include "device/stream_registry.h"

namespace strata {
namespace cuda_internal {

struct StreamDeleter {
  int device_id;
  void operator()(cudaStream_t stream) const;
};
using StreamHandle = std::unique_ptr<CUstream_st, StreamDeleter>;

struct EventDeleter {
  int device_id;
  void operator()(cudaEvent_t event) const;
};
using EventHandle = std::unique_ptr<CUevent_st, EventDeleter>;

class CudaStream : public Stream {
 public:
  // `registry` and `trace` are the device's; both outlive the stream.
  CudaStream(int device_id, std::string name, StreamHandle handle, StreamRegistry* registry,
             const std::atomic<Trace*>* trace);

  // Drains first: pending host work points at this object.
  ~CudaStream() override;

  void EnqueueHost(std::function<Status()> work) override;

  Status Synchronize() override;

  // The trace: a label change records a timing event (a mark) on the stream; the span of
  // a label runs from its mark to the next one, in GPU time (events), turned into host
  // time through an anchor event whose host time is known. Spans are written once both
  // marks have completed (at Synchronize, or when stalls are read).
  void SetTraceLabel(std::shared_ptr<const TraceLabel> label) override;
  std::shared_ptr<const TraceLabel> trace_label() const override;
  bool tracing() const override { return Recording() != nullptr; }

  const std::string& name() const override { return name_; }
  cudaStream_t native() const { return handle_.get(); }

  // Around each wait on another stream's event: a timing event before and after it on this
  // stream; the GPU time between them is the stall (0 where the event had completed).
  Status WaitTimed(cudaEvent_t event, const std::string& on);

  // Idle time: the thread that feeds the stream (the last to enqueue on it) may block in the
  // device (an event's or another stream's Synchronize) while the stream runs dry. There a
  // timing event (the drain mark) goes on the stream; when that thread feeds it again, a
  // second one (resume) goes right before the new work. The GPU time between the two is
  // time the stream ran nothing (about 0 when work was still queued at the resume).
  // Called before every enqueue on the stream.
  void Feeding();
  // The calling thread is about to block in the device: a drain mark if it feeds this stream.
  void MarkDrain();
  // Stalls plus the drained gaps whose resume the stream has reached.
  std::optional<double> idle_ms() const override;

  // The stalls measured so far: every timed wait whose end has been reached.
  double stalled_ms() const override;
  int device_id() const { return device_id_; }

  // "<what> on stream 'copy' of GPU 0", the context of this stream's CUDA calls.
  std::string Where(const std::string& what) const;

  // Keeps the first error; later ones are dropped (the first is the cause).
  void RecordError(const Status& status);

 private:
  struct HostWork {
    CudaStream* stream;
    std::function<Status()> work;
  };
  struct Stall {
    cudaEvent_t before, after;
    bool traced;     // shown as a "wait" span once resolved
    std::string on;  // the stream that recorded the event waited for
  };
  struct Gap {
    cudaEvent_t drain, resume;  // see Feeding
  };
  struct Mark {
    cudaEvent_t event;
    std::shared_ptr<const TraceLabel> label;  // from here on; null: nothing labelled
  };

  Trace* Recording() const;
  int Track(Trace& trace) const;
  // Under stall_mutex_: a timing event from the pool (or a new one).
  StatusOr<cudaEvent_t> TimingEventLocked() const;
  // Under stall_mutex_: a timing event from the pool recorded on the stream now (on
  // failure it goes back to the pool and the error is cleared and returned).
  StatusOr<cudaEvent_t> RecordTimingEventLocked(const char* what) const;
  // Under stall_mutex_: a mark where `label` begins; the first one also anchors GPU time
  // to host time (an event waited for at once, read against the host clock). Where nothing
  // was enqueued since the last mark, that mark takes the new label instead: a label
  // without work (an outer label around an inner one) shows no span, as on the CPU device.
  Status AddMarkLocked(std::shared_ptr<const TraceLabel> label);
  // Host time of a completed timing event of this stream.
  Trace::Clock::time_point HostTime(cudaEvent_t event) const;
  // Spans between consecutive completed marks, written to the trace (late: recording may
  // be off by now; every mark was made while it recorded).
  void ResolveMarks();

  // Runs on a CUDA-owned thread, in stream order. Must not call CUDA.
  static void CUDART_CB RunHostWork(void* data);

  const int device_id_;
  const std::string name_;
  std::mutex mutex_;
  Status first_error_;
  StreamRegistry* registry_;  // the device's; outlives the stream
  mutable std::mutex stall_mutex_;
  mutable std::deque<Stall> stalls_;         // timed waits, in order
  const std::atomic<Trace*>* trace_;         // the device's
  std::shared_ptr<const TraceLabel> label_;  // under stall_mutex_
  std::deque<Mark> marks_;                   // under stall_mutex_
  std::atomic<bool> work_since_mark_{false};  // set by Feeding and timed waits
  cudaEvent_t anchor_event_ = nullptr;       // GPU time 0 of this stream's trace
  Trace::Clock::time_point anchor_host_;
  mutable int track_ = -1;
  mutable const Trace* track_owner_ = nullptr;
  mutable std::vector<cudaEvent_t> spare_events_;
  mutable double stalled_ms_ = 0.0;
  std::atomic<std::thread::id> feeder_{};     // the thread that last enqueued work
  std::atomic<bool> drain_pending_{false};    // drain_ is recorded, its resume not yet
  cudaEvent_t drain_ = nullptr;               // under stall_mutex_
  mutable std::deque<Gap> gaps_;              // under stall_mutex_, in order
  mutable double starved_ms_ = 0.0;           // under stall_mutex_
  StreamHandle handle_;                       // destroyed after the host work queue
  std::unique_ptr<HostWorkQueue> host_work_;  // null: cudaLaunchHostFunc (see host_work.h)
};

class CudaEvent : public Event {
 public:
  CudaEvent(int device_id, EventHandle handle, StreamRegistry* streams)
      : device_id_(device_id), streams_(streams), handle_(std::move(handle)) {}

  Status Synchronize() override;

  // An error also answers true, so that a caller polling Query goes on to Synchronize,
  // which returns the error, instead of polling forever.
  bool Query() override;

  cudaEvent_t native() const { return handle_.get(); }
  int device_id() const { return device_id_; }

  // The stream of the latest Record (for the trace's wait spans).
  std::string recorded_on() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return recorded_on_;
  }
  void set_recorded_on(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded_on_ = name;
  }

 private:
  mutable std::mutex mutex_;
  std::string recorded_on_;
  const int device_id_;
  StreamRegistry* streams_;  // the device's; outlives the event
  EventHandle handle_;
};

}  // namespace cuda_internal
}  // namespace strata
