// A CUDA Device's streams and events: see cuda_stream.h.
#include "device/cuda/cuda_stream.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "device/cuda/cuda_gpu.h"
#include "device/cuda/cuda_status.h"

namespace strata {
namespace cuda_internal {

void StreamDeleter::operator()(cudaStream_t stream) const {
  LogIfError(Activate(device_id));
  LogIfError(CUDA_STATUS(cudaStreamDestroy(stream),
                         absl::StrCat("destroying a stream of ", Gpu(device_id))));
}

void EventDeleter::operator()(cudaEvent_t event) const {
  LogIfError(Activate(device_id));
  LogIfError(CUDA_STATUS(cudaEventDestroy(event),
                         absl::StrCat("destroying an event of ", Gpu(device_id))));
}

CudaStream::CudaStream(int device_id, std::string name, StreamHandle handle,
                       StreamRegistry* registry, const std::atomic<Trace*>* trace)
    : device_id_(device_id),
      name_(std::move(name)),
      registry_(registry),
      trace_(trace),
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

CudaStream::~CudaStream() {
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

void CudaStream::EnqueueHost(std::function<Status()> work) {
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

Status CudaStream::Synchronize() {
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

void CudaStream::SetTraceLabel(std::shared_ptr<const TraceLabel> label) {
  std::lock_guard<std::mutex> lock(stall_mutex_);
  label_ = std::move(label);
  if (Recording() != nullptr) AddMarkLocked(label_).IgnoreError();
}

std::shared_ptr<const TraceLabel> CudaStream::trace_label() const {
  std::lock_guard<std::mutex> lock(stall_mutex_);
  return label_;
}

Status CudaStream::WaitTimed(cudaEvent_t event, const std::string& on) {
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
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(handle_.get(), event, 0), Where("waiting for an event"));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(after, handle_.get()), Where("timing a wait"));
  work_since_mark_.store(true, std::memory_order_relaxed);  // the wait is the unlabelled span
  if (traced) RETURN_IF_ERROR(AddMarkLocked(label_));
  stalls_.push_back({before, after, traced, on});
  return absl::OkStatus();
}

void CudaStream::Feeding() {
  work_since_mark_.store(true, std::memory_order_relaxed);
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

void CudaStream::MarkDrain() {
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

std::optional<double> CudaStream::idle_ms() const {
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

double CudaStream::stalled_ms() const {
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
      trace->LateSpan(Track(*trace), "wait", "stall", HostTime(stall.before), HostTime(stall.after),
                      {{"for", stall.on}});
    }
    spare_events_.push_back(stall.before);
    spare_events_.push_back(stall.after);
    stalls_.pop_front();
  }
  cudaGetLastError();  // a query's cudaErrorNotReady is not an error
  return stalled_ms_;
}

std::string CudaStream::Where(const std::string& what) const {
  return absl::StrCat(what, " on stream '", name_, "' of ", Gpu(device_id_));
}

void CudaStream::RecordError(const Status& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_error_.ok()) first_error_ = Annotate(status, absl::StrCat("stream '", name_, "'"));
}

Trace* CudaStream::Recording() const {
  Trace* trace = trace_->load(std::memory_order_relaxed);
  return trace != nullptr && trace->recording() ? trace : nullptr;
}

int CudaStream::Track(Trace& trace) const {
  if (track_ < 0 || track_owner_ != &trace) {
    track_ = trace.Track(name_);
    track_owner_ = &trace;
  }
  return track_;
}

StatusOr<cudaEvent_t> CudaStream::TimingEventLocked() const {
  if (!spare_events_.empty()) {
    cudaEvent_t event = spare_events_.back();
    spare_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&event), Where("creating a trace timer"));
  return event;
}

StatusOr<cudaEvent_t> CudaStream::RecordTimingEventLocked(const char* what) const {
  ASSIGN_OR_RETURN(cudaEvent_t event, TimingEventLocked());
  const cudaError_t recorded = cudaEventRecord(event, handle_.get());
  if (recorded == cudaSuccess) return event;
  cudaGetLastError();
  spare_events_.push_back(event);
  return CudaStatus(recorded, "cudaEventRecord", __FILE__, __LINE__, Where(what));
}

Status CudaStream::AddMarkLocked(std::shared_ptr<const TraceLabel> label) {
  RETURN_IF_ERROR(Activate(device_id_));
  if (anchor_event_ == nullptr) {
    ASSIGN_OR_RETURN(anchor_event_, TimingEventLocked());
    CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_event_, handle_.get()),
                         Where("anchoring the trace"));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_event_), Where("anchoring the trace"));
    anchor_host_ = Trace::Clock::now();
  }
  if (!marks_.empty() && !work_since_mark_.load(std::memory_order_relaxed)) {
    marks_.back().label = std::move(label);  // the interval since it holds no work
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(cudaEvent_t event, RecordTimingEventLocked("marking the trace"));
  marks_.push_back({event, std::move(label)});
  work_since_mark_.store(false, std::memory_order_relaxed);
  return absl::OkStatus();
}

Trace::Clock::time_point CudaStream::HostTime(cudaEvent_t event) const {
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, anchor_event_, event);
  return anchor_host_ + std::chrono::duration_cast<Trace::Clock::duration>(
                            std::chrono::duration<double, std::milli>(ms));
}

void CudaStream::ResolveMarks() {
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

void CUDART_CB CudaStream::RunHostWork(void* data) {
  std::unique_ptr<HostWork> item(static_cast<HostWork*>(data));
  CudaStream& stream = *item->stream;
  {
    std::lock_guard<std::mutex> lock(stream.mutex_);
    if (!stream.first_error_.ok()) return;  // sticky: skip later host work
  }
  Status status = item->work();
  if (!status.ok()) stream.RecordError(status);
}

Status CudaEvent::Synchronize() {
  // The waiting thread may leave the streams it feeds to run dry (idle time).
  streams_->ForEach([](Stream& stream) { static_cast<CudaStream&>(stream).MarkDrain(); });
  RETURN_IF_ERROR(Activate(device_id_));
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(handle_.get()),
                       absl::StrCat("waiting for an event of ", Gpu(device_id_)));
  return absl::OkStatus();
}

bool CudaEvent::Query() {
  if (!Activate(device_id_).ok()) return true;
  return cudaEventQuery(handle_.get()) != cudaErrorNotReady;
}

}  // namespace cuda_internal
}  // namespace strata
