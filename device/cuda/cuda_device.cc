// CUDA Device: cudaMalloc'd and pinned buffers counted in capped pools, non-blocking
// streams with sticky errors, timing-free events. See cuda_device.h.
#include "device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device/block_cache.h"
#include "device/tiered_memory.h"
#include "device/cuda/cuda_native.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/host_work.h"
#include "core/logging.h"
#include "device/stream_registry.h"

namespace strata {
namespace {

constexpr size_t kAlignment = 4096;
constexpr size_t kHugePageBytes = 2u << 20;

std::string Gpu(int device_id) { return absl::StrCat("GPU ", device_id); }

std::string Address(const void* pointer) { return absl::StrFormat("%p", pointer); }

// Makes `device_id` current on the calling thread: CUDA's current device is per thread,
// and streams, events and allocations belong to the device that was current.
Status Activate(int device_id) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id), absl::StrCat("selecting ", Gpu(device_id)));
  return absl::OkStatus();
}

// Errors in destructors cannot be returned; they are logged once, with their context.
void LogIfError(const Status& status) {
  if (!status.ok()) spdlog::error("{}", status.ToString());
}

struct StreamDeleter {
  int device_id;
  void operator()(cudaStream_t stream) const {
    LogIfError(Activate(device_id));
    LogIfError(CUDA_STATUS(cudaStreamDestroy(stream),
                           absl::StrCat("destroying a stream of ", Gpu(device_id))));
  }
};
using StreamHandle = std::unique_ptr<CUstream_st, StreamDeleter>;

struct EventDeleter {
  int device_id;
  void operator()(cudaEvent_t event) const {
    LogIfError(Activate(device_id));
    LogIfError(CUDA_STATUS(cudaEventDestroy(event),
                           absl::StrCat("destroying an event of ", Gpu(device_id))));
  }
};
using EventHandle = std::unique_ptr<CUevent_st, EventDeleter>;

class CudaStream : public Stream {
 public:
  CudaStream(int device_id, std::string name, StreamHandle handle, StreamRegistry* registry,
             const std::atomic<Trace*>* trace)
      : device_id_(device_id), name_(std::move(name)), registry_(registry), trace_(trace),
        handle_(std::move(handle)) {
    registry_->Add(this);
    HostWorkQueue::Hooks hooks;
    hooks.failed = [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      return !first_error_.ok();
    };
    hooks.fail = [this](const Status& status) { RecordError(status); };
    StatusOr<std::unique_ptr<HostWorkQueue>> queue =
        HostWorkQueue::Create(device_id_, handle_.get(), Where("host work"), std::move(hooks));
    if (queue.ok()) {
      host_work_ = std::move(*queue);
    } else {
      // Still correct, only slower and with the callbacks' limits (see host_work.h).
      static std::once_flag once;
      std::call_once(once, [&] {
        spdlog::warn("CUDA host work runs in cudaLaunchHostFunc callbacks: {}",
                     std::string(queue.status().message()));
      });
    }
  }

  // Drains first: pending host work points at this object.
  ~CudaStream() override {
    LogIfError(Activate(device_id_));
    LogIfError(CUDA_STATUS(cudaStreamSynchronize(handle_.get()), Where("draining")));
    host_work_.reset();  // its worker has run everything the stream waited for
    registry_->Remove(this);
    ResolveMarks();  // every span whose end the stream reached
    for (const Stall& stall : stalls_) {
      cudaEventDestroy(stall.before);
      cudaEventDestroy(stall.after);
    }
    for (const Mark& mark : marks_) cudaEventDestroy(mark.event);
    for (const Gap& gap : gaps_) {
      cudaEventDestroy(gap.drain);
      cudaEventDestroy(gap.resume);
    }
    if (drain_ != nullptr) cudaEventDestroy(drain_);
    if (anchor_event_ != nullptr) cudaEventDestroy(anchor_event_);
    for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  }

  void EnqueueHost(std::function<Status()> work) override {
    Feeding();
    if (host_work_ != nullptr) {
      Status enqueued = Activate(device_id_);
      if (enqueued.ok()) enqueued = host_work_->Enqueue(std::move(work));
      if (!enqueued.ok()) RecordError(enqueued);
      return;
    }
    auto item = std::make_unique<HostWork>(HostWork{this, std::move(work)});
    Status launched = Activate(device_id_);
    if (launched.ok()) {
      launched = CUDA_STATUS(cudaLaunchHostFunc(handle_.get(), &RunHostWork, item.get()),
                             absl::StrCat("enqueueing host work on ", Gpu(device_id_)));
    }
    if (launched.ok()) {
      item.release();  // RunHostWork owns it now
    } else {
      RecordError(launched);
    }
  }

  Status Synchronize() override {
    registry_->ForEach([this](Stream& other) {
      if (&other != this) static_cast<CudaStream&>(other).MarkDrain();
    });
    Status synced = Activate(device_id_);
    if (synced.ok()) {
      synced = CUDA_STATUS(cudaStreamSynchronize(handle_.get()),
                           absl::StrCat("synchronizing on ", Gpu(device_id_)));
    }
    if (!synced.ok()) RecordError(synced);
    ResolveMarks();
    std::lock_guard<std::mutex> lock(mutex_);
    return first_error_;
  }

  // The trace: a label change records a timing event (a mark) on the stream; the span of
  // a label runs from its mark to the next one, in GPU time (events), turned into host
  // time through an anchor event whose host time is known. Spans are written once both
  // marks have completed (at Synchronize, or when stalls are read).
  void SetTraceLabel(std::shared_ptr<const TraceLabel> label) override {
    std::lock_guard<std::mutex> lock(stall_mutex_);
    label_ = std::move(label);
    if (Recording() != nullptr) AddMarkLocked(label_).IgnoreError();
  }
  std::shared_ptr<const TraceLabel> trace_label() const override {
    std::lock_guard<std::mutex> lock(stall_mutex_);
    return label_;
  }
  bool tracing() const override { return Recording() != nullptr; }

  const std::string& name() const override { return name_; }
  cudaStream_t native() const { return handle_.get(); }

  // Around each wait on another stream's event: a timing event before and after it on this
  // stream; the GPU time between them is the stall (0 where the event had completed).
  Status WaitTimed(cudaEvent_t event, const std::string& on) {
    cudaEvent_t before = nullptr, after = nullptr;
    {
      std::lock_guard<std::mutex> lock(stall_mutex_);
      for (cudaEvent_t* slot : {&before, &after}) {
        if (!spare_events_.empty()) {
          *slot = spare_events_.back();
          spare_events_.pop_back();
        }
      }
    }
    for (cudaEvent_t* slot : {&before, &after}) {
      if (*slot == nullptr) {
        CUDA_RETURN_IF_ERROR(cudaEventCreate(slot), Where("creating a stall timer"));
      }
    }
    const bool traced = Recording() != nullptr;
    std::lock_guard<std::mutex> lock(stall_mutex_);
    // Traced: the label's span pauses for the wait (a mark without label before it, one
    // resuming the label after), so a "wait" span never overlaps it.
    if (traced) RETURN_IF_ERROR(AddMarkLocked(nullptr));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(before, handle_.get()), Where("timing a wait"));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(handle_.get(), event, 0),
                         Where("waiting for an event"));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(after, handle_.get()), Where("timing a wait"));
    if (traced) RETURN_IF_ERROR(AddMarkLocked(label_));
    stalls_.push_back({before, after, traced, on});
    return absl::OkStatus();
  }

  // Idle time: the thread that feeds the stream (the last to enqueue on it) may block in the
  // device (an event's or another stream's Synchronize) while the stream runs dry. There a
  // timing event (the drain mark) goes on the stream; when that thread feeds it again, a
  // second one (resume) goes right before the new work. The GPU time between the two is
  // time the stream ran nothing (about 0 when work was still queued at the resume).
  // Called before every enqueue on the stream.
  void Feeding() {
    feeder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    if (!drain_pending_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(stall_mutex_);
    if (drain_ == nullptr || !Activate(device_id_).ok()) return;
    StatusOr<cudaEvent_t> resume = RecordTimingEventLocked("timing a resume");
    if (!resume.ok()) return;  // the gap goes uncounted; the next drain mark starts afresh
    gaps_.push_back({drain_, *resume});
    drain_ = nullptr;
    drain_pending_.store(false, std::memory_order_release);
  }
  // The calling thread is about to block in the device: a drain mark if it feeds this stream.
  void MarkDrain() {
    if (feeder_.load(std::memory_order_relaxed) != std::this_thread::get_id() ||
        drain_pending_.load(std::memory_order_acquire)) {
      return;
    }
    std::lock_guard<std::mutex> lock(stall_mutex_);
    if (drain_ != nullptr || !Activate(device_id_).ok()) return;
    StatusOr<cudaEvent_t> drain = RecordTimingEventLocked("timing a drain");
    if (!drain.ok()) return;
    drain_ = *drain;
    drain_pending_.store(true, std::memory_order_release);
  }
  // Stalls plus the drained gaps whose resume the stream has reached.
  std::optional<double> idle_ms() const override {
    const double stalled = stalled_ms();
    std::lock_guard<std::mutex> lock(stall_mutex_);
    if (cudaSetDevice(device_id_) == cudaSuccess) {
      while (!gaps_.empty() && cudaEventQuery(gaps_.front().resume) == cudaSuccess) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, gaps_.front().drain, gaps_.front().resume) == cudaSuccess) {
          starved_ms_ += ms;
        }
        spare_events_.push_back(gaps_.front().drain);
        spare_events_.push_back(gaps_.front().resume);
        gaps_.pop_front();
      }
      cudaGetLastError();  // a query's cudaErrorNotReady is not an error
    }
    return stalled + starved_ms_;
  }

  // The stalls measured so far: every timed wait whose end has been reached.
  double stalled_ms() const override {
    std::lock_guard<std::mutex> lock(stall_mutex_);
    if (cudaSetDevice(device_id_) != cudaSuccess) return stalled_ms_;
    while (!stalls_.empty() && cudaEventQuery(stalls_.front().after) == cudaSuccess) {
      const Stall& stall = stalls_.front();
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, stall.before, stall.after) == cudaSuccess) {
        stalled_ms_ += ms;
      }
      Trace* trace = trace_->load();
      if (stall.traced && trace != nullptr && anchor_event_ != nullptr) {
        trace->LateSpan(Track(*trace), "wait", "stall", HostTime(stall.before),
                        HostTime(stall.after), {{"for", stall.on}});
      }
      spare_events_.push_back(stall.before);
      spare_events_.push_back(stall.after);
      stalls_.pop_front();
    }
    cudaGetLastError();  // a query's cudaErrorNotReady is not an error
    return stalled_ms_;
  }
  int device_id() const { return device_id_; }

  // "<what> on stream 'copy' of GPU 0", the context of this stream's CUDA calls.
  std::string Where(const std::string& what) const {
    return absl::StrCat(what, " on stream '", name_, "' of ", Gpu(device_id_));
  }

  // Keeps the first error; later ones are dropped (the first is the cause).
  void RecordError(const Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_error_.ok()) first_error_ = Annotate(status, absl::StrCat("stream '", name_, "'"));
  }

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

  Trace* Recording() const {
    Trace* trace = trace_->load(std::memory_order_relaxed);
    return trace != nullptr && trace->recording() ? trace : nullptr;
  }
  int Track(Trace& trace) const {
    if (track_ < 0 || track_owner_ != &trace) {
      track_ = trace.Track(name_);
      track_owner_ = &trace;
    }
    return track_;
  }
  // Under stall_mutex_: a timing event from the pool (or a new one).
  StatusOr<cudaEvent_t> TimingEventLocked() const {
    if (!spare_events_.empty()) {
      cudaEvent_t event = spare_events_.back();
      spare_events_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&event), Where("creating a trace timer"));
    return event;
  }
  // Under stall_mutex_: a timing event from the pool recorded on the stream now (on
  // failure it goes back to the pool and the error is cleared and returned).
  StatusOr<cudaEvent_t> RecordTimingEventLocked(const char* what) const {
    ASSIGN_OR_RETURN(cudaEvent_t event, TimingEventLocked());
    const cudaError_t recorded = cudaEventRecord(event, handle_.get());
    if (recorded == cudaSuccess) return event;
    cudaGetLastError();
    spare_events_.push_back(event);
    return CudaStatus(recorded, "cudaEventRecord", __FILE__, __LINE__, Where(what));
  }
  // Under stall_mutex_: a mark where `label` begins; the first one also anchors GPU time
  // to host time (an event waited for at once, read against the host clock).
  Status AddMarkLocked(std::shared_ptr<const TraceLabel> label) {
    RETURN_IF_ERROR(Activate(device_id_));
    if (anchor_event_ == nullptr) {
      ASSIGN_OR_RETURN(anchor_event_, TimingEventLocked());
      CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_event_, handle_.get()), Where("anchoring the trace"));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_event_), Where("anchoring the trace"));
      anchor_host_ = Trace::Clock::now();
    }
    ASSIGN_OR_RETURN(cudaEvent_t event, RecordTimingEventLocked("marking the trace"));
    marks_.push_back({event, std::move(label)});
    return absl::OkStatus();
  }
  // Host time of a completed timing event of this stream.
  Trace::Clock::time_point HostTime(cudaEvent_t event) const {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, anchor_event_, event);
    return anchor_host_ + std::chrono::duration_cast<Trace::Clock::duration>(
                              std::chrono::duration<double, std::milli>(ms));
  }
  // Spans between consecutive completed marks, written to the trace (late: recording may
  // be off by now; every mark was made while it recorded).
  void ResolveMarks() {
    std::lock_guard<std::mutex> lock(stall_mutex_);
    Trace* trace = trace_->load();
    if (cudaSetDevice(device_id_) != cudaSuccess) return;
    while (marks_.size() >= 2 && cudaEventQuery(marks_[1].event) == cudaSuccess) {
      const Mark& first = marks_[0];
      if (first.label != nullptr && trace != nullptr) {
        trace->LateSpan(Track(*trace), first.label->name, first.label->category,
                        HostTime(first.event), HostTime(marks_[1].event), first.label->args);
      }
      spare_events_.push_back(first.event);
      marks_.pop_front();
    }
    cudaGetLastError();  // a query's cudaErrorNotReady is not an error
  }

  // Runs on a CUDA-owned thread, in stream order. Must not call CUDA.
  static void CUDART_CB RunHostWork(void* data) {
    std::unique_ptr<HostWork> item(static_cast<HostWork*>(data));
    CudaStream& stream = *item->stream;
    {
      std::lock_guard<std::mutex> lock(stream.mutex_);
      if (!stream.first_error_.ok()) return;  // sticky: skip later host work
    }
    Status status = item->work();
    if (!status.ok()) stream.RecordError(status);
  }

  const int device_id_;
  const std::string name_;
  std::mutex mutex_;
  Status first_error_;
  StreamRegistry* registry_;  // the device's; outlives the stream
  mutable std::mutex stall_mutex_;
  mutable std::deque<Stall> stalls_;  // timed waits, in order
  const std::atomic<Trace*>* trace_;  // the device's
  std::shared_ptr<const TraceLabel> label_;  // under stall_mutex_
  std::deque<Mark> marks_;                   // under stall_mutex_
  cudaEvent_t anchor_event_ = nullptr;       // GPU time 0 of this stream's trace
  Trace::Clock::time_point anchor_host_;
  mutable int track_ = -1;
  mutable const Trace* track_owner_ = nullptr;
  mutable std::vector<cudaEvent_t> spare_events_;
  mutable double stalled_ms_ = 0.0;
  std::atomic<std::thread::id> feeder_{};   // the thread that last enqueued work
  std::atomic<bool> drain_pending_{false};  // drain_ is recorded, its resume not yet
  cudaEvent_t drain_ = nullptr;             // under stall_mutex_
  mutable std::deque<Gap> gaps_;            // under stall_mutex_, in order
  mutable double starved_ms_ = 0.0;         // under stall_mutex_
  StreamHandle handle_;  // destroyed after the host work queue
  std::unique_ptr<HostWorkQueue> host_work_;  // null: cudaLaunchHostFunc (see host_work.h)
};

class CudaEvent : public Event {
 public:
  CudaEvent(int device_id, EventHandle handle, StreamRegistry* streams)
      : device_id_(device_id), streams_(streams), handle_(std::move(handle)) {}

  Status Synchronize() override {
    // The waiting thread may leave the streams it feeds to run dry (idle time).
    streams_->ForEach([](Stream& stream) { static_cast<CudaStream&>(stream).MarkDrain(); });
    RETURN_IF_ERROR(Activate(device_id_));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(handle_.get()),
                         absl::StrCat("waiting for an event of ", Gpu(device_id_)));
    return absl::OkStatus();
  }

  // An error also answers true, so that a caller polling Query goes on to Synchronize,
  // which returns the error, instead of polling forever.
  bool Query() override {
    if (!Activate(device_id_).ok()) return true;
    return cudaEventQuery(handle_.get()) != cudaErrorNotReady;
  }

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

// One allocation: `data` (4 KiB-aligned) inside the block that starts at `base`.
struct Block {
  void* base = nullptr;
  void* data = nullptr;
};

bool IsAligned(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % kAlignment == 0;
}

void* AlignUp(void* pointer) {
  uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  return reinterpret_cast<void*>((address + kAlignment - 1) / kAlignment * kAlignment);
}

class CudaDevice : public Device {
 public:
  CudaDevice(int device_id, const CudaDeviceOptions& options, uint64_t device_capacity_bytes,
             std::string description)
      : device_id_(device_id),
        description_(std::move(description)),
        memory_(MemoryOptions(options, device_capacity_bytes)) {}

  StatusOr<Buffer> Allocate(Tier tier, StateKind kind, size_t bytes,
                            const std::string& what) override {
    return memory_.Allocate(tier, kind, bytes, what);
  }

  uint64_t driver_calls() const override { return memory_.driver_calls(); }

  std::optional<Tier> TierOf(const void* pointer) const override {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      return std::nullopt;
    }
    if (attributes.type == cudaMemoryTypeDevice) return Tier::kDevice;
    if (attributes.type == cudaMemoryTypeHost) return Tier::kHost;
    return std::nullopt;
  }

  StatusOr<std::unique_ptr<Stream>> CreateStream(const std::string& name) override {
    RETURN_IF_ERROR(Activate(device_id_));
    cudaStream_t stream = nullptr;
    // Non-blocking: no implicit synchronisation with the legacy default stream, so copy
    // and compute streams overlap only as events say.
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                         absl::StrCat("creating stream '", name, "' on ", Gpu(device_id_)));
    return std::unique_ptr<Stream>(
        new CudaStream(device_id_, name, StreamHandle(stream, StreamDeleter{device_id_}),
                       &streams_, &trace_));
  }

  void SetTrace(Trace* trace) override {
    trace_.store(trace);
    memory_.SetTrace(trace);
  }
  Trace* trace() const override { return trace_.load(); }

  StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    RETURN_IF_ERROR(Activate(device_id_));
    cudaEvent_t event = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                         absl::StrCat("creating an event on ", Gpu(device_id_)));
    return std::unique_ptr<Event>(
        new CudaEvent(device_id_, EventHandle(event, EventDeleter{device_id_}), &streams_));
  }

  Status Record(Event& event, Stream& stream) override {
    ASSIGN_OR_RETURN(CudaEvent * cuda_event, Mine(event));
    ASSIGN_OR_RETURN(CudaStream * cuda_stream, Mine(stream));
    RETURN_IF_ERROR(Activate(device_id_));
    // Not Feeding(): a record enqueues no work, and any thread records (the block cache's
    // fences record on every stream), which would take the stream from its feeder.
    CUDA_RETURN_IF_ERROR(cudaEventRecord(cuda_event->native(), cuda_stream->native()),
                         cuda_stream->Where("recording an event"));
    cuda_event->set_recorded_on(stream.name());
    return absl::OkStatus();
  }

  Status Wait(Stream& stream, Event& event) override {
    ASSIGN_OR_RETURN(CudaEvent * cuda_event, Mine(event));
    ASSIGN_OR_RETURN(CudaStream * cuda_stream, Mine(stream));
    RETURN_IF_ERROR(Activate(device_id_));
    cuda_stream->Feeding();
    // An event never recorded counts as complete, as on the CPU backend.
    return cuda_stream->WaitTimed(cuda_event->native(), cuda_event->recorded_on());
  }

  Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) override {
    if (bytes == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(CudaStream * cuda_stream, Mine(stream));
    RETURN_IF_ERROR(Activate(device_id_));
    cuda_stream->Feeding();
    // cudaMemcpyDefault: unified addressing tells the direction from the pointers.
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream->native()),
        cuda_stream->Where(absl::StrCat("copying ", FormatBytes(bytes), " (", bytes,
                                        " bytes) from ", Address(src), " to ", Address(dst))));
    return absl::OkStatus();
  }

  Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override {
    if (bytes == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(CudaStream * cuda_stream, Mine(stream));
    RETURN_IF_ERROR(Activate(device_id_));
    cuda_stream->Feeding();
    const std::string context = cuda_stream->Where(absl::StrCat(
        "setting ", FormatBytes(bytes), " (", bytes, " bytes) at ", Address(dst), " to ", value));
    cudaPointerAttributes attributes{};
    CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, dst), context);
    if (attributes.type == cudaMemoryTypeDevice) {
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, bytes, cuda_stream->native()), context);
      return absl::OkStatus();
    }
    // Host memory (pinned or not): cudaMemsetAsync only writes device memory, so the
    // memset runs as host work, in order with the stream.
    stream.EnqueueHost([dst, value, bytes] {
      std::memset(dst, value, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  MemoryPool& pool(Tier tier) override { return memory_.pool(tier); }

  std::string Describe() const override { return description_; }

  int device_id() const { return device_id_; }

 private:
  std::atomic<Trace*> trace_{nullptr};  // see SetTrace

  // Each tier through a block cache (a quarter of the tier, at most 8 GiB: enough for a
  // step's transient buffers) over cudaMalloc (device) or pinned memory (host).
  TieredMemory::Options MemoryOptions(const CudaDeviceOptions& options,
                                      uint64_t device_capacity_bytes) {
    TieredMemory::Options memory;
    for (Tier tier : {Tier::kDevice, Tier::kHost}) {
      TierDriver& driver = tier == Tier::kDevice ? memory.device : memory.host;
      driver.allocate = [this, tier](size_t class_bytes) -> StatusOr<RawBlock> {
        const std::string context = absl::StrCat("allocating ", FormatBytes(class_bytes),
                                                 " on the ", TierName(tier), " tier of ",
                                                 Gpu(device_id_));
        StatusOr<Block> block = tier == Tier::kDevice ? AllocateDevice(class_bytes, context)
                                                      : AllocateHost(class_bytes, context);
        if (!block.ok()) return block.status();
        return RawBlock{block->base, block->data, class_bytes};
      };
      driver.free = [this, tier](const RawBlock& block) { FreeBlock(tier, block); };
      driver.capacity_bytes =
          tier == Tier::kDevice ? device_capacity_bytes : options.host_memory_bytes;
      driver.limit_key = tier == Tier::kDevice ? "device.memory_limit" : "tiers.host_memory_limit";
      driver.max_cached_bytes = std::min<uint64_t>(driver.capacity_bytes / 4, 8ull << 30);
    }
    memory.fence = [this] { return streams_.Fence(*this); };
    return memory;
  }
  // cudaMalloc guarantees 256-byte alignment; small blocks come out of shared 2 MiB pages
  // at finer steps. A block that misses 4 KiB is retried once with room to align inside.
  StatusOr<Block> AllocateDevice(size_t bytes, const std::string& context) {
    RETURN_IF_ERROR(Activate(device_id_));
    const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    void* base = nullptr;
    Status status = CUDA_STATUS(cudaMalloc(&base, rounded), context);
    if (status.ok() && IsAligned(base)) return Block{base, base};
    if (status.ok()) {
      RETURN_IF_ERROR(CUDA_STATUS(cudaFree(base), context));
      status = CUDA_STATUS(cudaMalloc(&base, rounded + kAlignment), context);
      if (status.ok()) return Block{base, AlignUp(base)};
    }
    return WithFreeMemory(status);
  }

  // Pinned host memory. Blocks of 2 MiB and more (a size class: whole 2 MiB pages) sit on
  // transparent huge pages, as on the CPU device, then are registered with CUDA: direct
  // NVMe reads into 4 KiB pages run 2-3x slower on these machines. Smaller ones come from
  // cudaHostAlloc, which returns page-aligned blocks (a misaligned one is retried with
  // room).
  StatusOr<Block> AllocateHost(size_t bytes, const std::string& context) {
    RETURN_IF_ERROR(Activate(device_id_));
    if (bytes >= kHugePageBytes) {
      void* data = std::aligned_alloc(kHugePageBytes, bytes);
      if (data == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(context, ": out of system memory"));
      }
      ::madvise(data, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
      Status registered =
          CUDA_STATUS(cudaHostRegister(data, bytes, cudaHostRegisterDefault), context);
      if (!registered.ok()) {
        std::free(data);
        return registered;
      }
      return Block{data, data};
    }
    const size_t exact = bytes == 0 ? 1 : bytes;  // a zero-byte buffer is still non-empty
    void* base = nullptr;
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(&base, exact, cudaHostAllocDefault), context);
    if (IsAligned(base)) return Block{base, base};
    RETURN_IF_ERROR(CUDA_STATUS(cudaFreeHost(base), context));
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(&base, exact + kAlignment, cudaHostAllocDefault), context);
    return Block{base, AlignUp(base)};
  }

  // A block back to the driver (the cache's free hook).
  void FreeBlock(Tier tier, const RawBlock& block) {
    LogIfError(Activate(device_id_));
    const std::string context =
        absl::StrCat("freeing ", block.bytes, " ", TierName(tier), " bytes of ", Gpu(device_id_));
    if (tier == Tier::kDevice) {
      LogIfError(CUDA_STATUS(cudaFree(block.base), context));
    } else if (block.bytes >= kHugePageBytes) {
      LogIfError(CUDA_STATUS(cudaHostUnregister(block.base), context));
      std::free(block.base);
    } else {
      LogIfError(CUDA_STATUS(cudaFreeHost(block.base), context));
    }
  }

  // Adds what the GPU has free to an out-of-memory error: another process, or
  // fragmentation, can leave less than the pool believes.
  Status WithFreeMemory(const Status& status) {
    if (status.code() != absl::StatusCode::kResourceExhausted) return status;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return status;
    return Status(
        status.code(),
        absl::StrCat(status.message(), "; ", Gpu(device_id_), " has ", FormatBytes(free_bytes),
                     " free of ", FormatBytes(total_bytes),
                     " (device tier: ", FormatBytes(memory_.pool(Tier::kDevice).Stats().current_bytes),
                     " in use of ",
                     FormatBytes(memory_.pool(Tier::kDevice).Stats().capacity_bytes), ")"));
  }

  StatusOr<CudaStream*> Mine(Stream& stream) {
    auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
    if (cuda_stream == nullptr || cuda_stream->device_id() != device_id_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream '", stream.name(), "' was not made by the CUDA device of ", Gpu(device_id_)));
    }
    return cuda_stream;
  }

  StatusOr<CudaEvent*> Mine(Event& event) {
    auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
    if (cuda_event == nullptr || cuda_event->device_id() != device_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("an event was not made by the CUDA device of ", Gpu(device_id_)));
    }
    return cuda_event;
  }

  const int device_id_;
  StreamRegistry streams_;  // before the memory: the fences use it
  const std::string description_;
  TieredMemory memory_;  // every Buffer must go first
};

}  // namespace

StatusOr<int> CudaDeviceCount() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return CudaStatus(error, "cudaGetDeviceCount(&count)", __FILE__, __LINE__, "counting GPUs");
  }
  return count;
}

bool BuiltWithCuda() { return true; }

StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const CudaDeviceOptions& options) {
  if (options.local_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rank must be >= 0 to select a GPU, got ", options.local_rank));
  }
  const std::string selecting = absl::StrCat("selecting a GPU for local rank ", options.local_rank);
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return Annotate(count.status(), selecting);
  if (*count == 0) {
    return absl::UnavailableError(absl::StrCat(
        selecting, ": no GPU is visible (cudaGetDeviceCount = 0; check CUDA_VISIBLE_DEVICES)"));
  }
  const int device_id = options.local_rank % *count;
  RETURN_IF_ERROR(Annotate(Activate(device_id), selecting));

  cudaDeviceProp properties{};
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device_id),
                       absl::StrCat("reading the properties of ", Gpu(device_id)));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes),
                       absl::StrCat("reading the free memory of ", Gpu(device_id)));

  // Stream-ordered scratch (cudaMallocAsync: the GEMM attention's score matrices, the
  // column sums) comes from the GPU's default pool, which by default hands its memory back
  // at every synchronisation and maps it afresh in the next step; keep up to 1 GiB.
  cudaMemPool_t scratch_pool = nullptr;
  uint64_t keep_bytes = uint64_t{1} << 30;
  if (cudaDeviceGetDefaultMemPool(&scratch_pool, device_id) != cudaSuccess ||
      cudaMemPoolSetAttribute(scratch_pool, cudaMemPoolAttrReleaseThreshold, &keep_bytes) !=
          cudaSuccess) {
    spdlog::warn("{}: the stream-ordered scratch pool keeps no memory between steps: {}",
                 Gpu(device_id), cudaGetErrorString(cudaGetLastError()));
  }
  const uint64_t capacity_bytes = std::min<uint64_t>(options.device_memory_bytes, free_bytes);
  std::string description =
      absl::StrCat("cuda:", device_id, " (", properties.name, ", sm_", properties.major,
                   properties.minor, ", ", FormatBytes(total_bytes), ", ", FormatBytes(free_bytes),
                   " free; local rank ", options.local_rank, " of ", *count,
                   " GPUs) with the device tier capped at ", FormatBytes(capacity_bytes));
  if (capacity_bytes < options.device_memory_bytes) {
    absl::StrAppend(&description, " (device.memory_limit ",
                    FormatBytes(options.device_memory_bytes), " clipped to the GPU's free memory)");
  } else {
    absl::StrAppend(&description, " (device.memory_limit)");
  }
  return std::unique_ptr<Device>(
      new CudaDevice(device_id, options, capacity_bytes, std::move(description)));
}

StatusOr<cudaStream_t> NativeStream(Stream& stream) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  if (cuda_stream == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream '", stream.name(), "' is not a CUDA stream"));
  }
  cuda_stream->Feeding();  // the caller enqueues work on it next
  return cuda_stream->native();
}

StatusOr<cudaEvent_t> NativeEvent(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr) return absl::InvalidArgumentError("the event is not a CUDA event");
  return cuda_event->native();
}

StatusOr<int> NativeDeviceId(Device& device) {
  auto* cuda_device = dynamic_cast<CudaDevice*>(&device);
  if (cuda_device == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device.Describe(), " is not a CUDA device"));
  }
  return cuda_device->device_id();
}

}  // namespace strata
