// CPU Device: worker-thread streams, counter events, capped pools. See cpu_device.h.
#include "device/cpu_device.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <map>
#include <set>
#include <thread>

#include "core/aligned_mapping.h"
#include "device/block_cache.h"
#include "device/tiered_memory.h"
#include "device/stream_registry.h"

namespace strata {
namespace {

// An event's state is shared with the work that records or waits on it, so destroying
// the Event while that work is still queued is safe (as with cudaEventDestroy).
// Records of one event may be issued on different streams and complete out of order, so
// each generation is tracked on its own: a wait for generation g ends when g (not some
// later record on a faster stream) has completed, as with CUDA's capture at wait time.
struct CpuEventState {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0;
  uint64_t completed_through = 0;    // every generation <= this has completed
  std::set<uint64_t> completed_ahead;  // completed generations above it
  // Generations recorded on a stream that had failed: the error, passed on to every
  // stream that waits for them (so no stream computes on what a failed copy left).
  std::map<uint64_t, Status> failed;
  std::string recorded_on;  // the stream of the latest record (for the trace's wait spans)

  void Complete(uint64_t generation, Status error) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error.ok()) failed.emplace(generation, std::move(error));
    if (generation <= completed_through) return;
    completed_ahead.insert(generation);
    while (!completed_ahead.empty() && *completed_ahead.begin() == completed_through + 1) {
      completed_ahead.erase(completed_ahead.begin());
      ++completed_through;
    }
    cv.notify_all();
  }
  bool IsComplete(uint64_t generation) const {
    return generation <= completed_through || completed_ahead.count(generation) > 0;
  }
  // Blocks until `generation` has completed; its recording stream's error, if any.
  Status WaitFor(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return IsComplete(generation); });
    auto it = failed.find(generation);
    return it == failed.end() ? absl::OkStatus() : it->second;
  }
};

class CpuEvent : public Event {
 public:
  // Called on the host when Record is issued; returns the generation to complete.
  uint64_t NextRecord() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return ++state_->recorded;
  }
  uint64_t LatestRecord() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->recorded;
  }
  Status Synchronize() override {
    state_->WaitFor(LatestRecord()).IgnoreError();  // the recording stream reports it
    return absl::OkStatus();
  }
  bool Query() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->IsComplete(state_->recorded);
  }
  const std::shared_ptr<CpuEventState>& state() const { return state_; }

 private:
  std::shared_ptr<CpuEventState> state_ = std::make_shared<CpuEventState>();
};

class CpuStream : public Stream {
 public:
  // `item_delay`: each item waits this long before it runs (a dry run's streams: slower
  // than the host that feeds them, as a real device's are, so buffers freed after a
  // stream's work live as long as in a real run, as far as the limiters let the host run
  // ahead).
  CpuStream(std::string name, StreamRegistry* registry, const std::atomic<Trace*>* trace,
            std::chrono::microseconds item_delay = std::chrono::microseconds(0))
      : name_(std::move(name)), registry_(registry), trace_(trace), item_delay_(item_delay),
        worker_([this] { Run(); }) {
    registry_->Add(this);
  }
  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      cv_.notify_all();
    }
    worker_.join();
    registry_->Remove(this);
  }

  void EnqueueHost(std::function<Status()> work) override {
    Push({std::move(work), false, nullptr});
  }

  // Work that runs even after the stream failed: event records and waits, so that nobody
  // waiting on this stream's events waits forever and ordering between streams holds.
  // Not shown in the trace (a wait shows itself, see AddStall).
  void EnqueueAlways(std::function<Status()> work) { Push({std::move(work), true, nullptr}); }

  void SetTraceLabel(std::shared_ptr<const TraceLabel> label) override {
    std::lock_guard<std::mutex> lock(mutex_);
    label_ = std::move(label);
  }
  std::shared_ptr<const TraceLabel> trace_label() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return label_;
  }
  bool tracing() const override {
    const Trace* trace = trace_->load(std::memory_order_relaxed);
    return trace != nullptr && trace->recording();
  }

  // The stream's first error so far; only for work running on the stream itself.
  const Status& error_in_order() const { return first_error_; }

  Status Synchronize() override {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t target = enqueued_;
    done_cv_.wait(lock, [&] { return finished_ >= target; });
    return first_error_;
  }

  const std::string& name() const override { return name_; }
  double stalled_ms() const override { return stalled_us_.load() / 1000.0; }
  double busy_ms() const override {
    return (ran_us_.load() - stalled_us_.load()) / 1000.0;
  }
  // A wait on another stream's event took [start, end): counted as stall, and shown as a
  // "wait" span (the same duration) on this stream's track. Runs on the worker.
  void AddStall(std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end, const std::string& on) {
    stalled_us_ += std::chrono::duration_cast<std::chrono::microseconds>(end - start).count();
    if (Trace* trace = Recording()) {
      trace->Span(Track(*trace), "wait", "stall", start, end, {{"for", on}});
    }
  }

 private:
  struct Task {
    std::function<Status()> work;
    bool always;
    std::shared_ptr<const TraceLabel> label;  // set by Push where the trace records
  };
  // Consecutive work of one label, shown as one span once it ends (worker-only state).
  struct OpenSpan {
    std::shared_ptr<const TraceLabel> label;
    std::chrono::steady_clock::time_point begin, end;
  };

  Trace* Recording() const {
    Trace* trace = trace_->load(std::memory_order_relaxed);
    return trace != nullptr && trace->recording() ? trace : nullptr;
  }
  int Track(Trace& trace) {
    if (track_ < 0 || track_owner_ != &trace) {
      track_ = trace.Track(name_);
      track_owner_ = &trace;
    }
    return track_;
  }
  void CloseSpan() {
    if (open_.label == nullptr) return;
    if (Trace* trace = Recording()) {
      trace->Span(Track(*trace), open_.label->name, open_.label->category, open_.begin,
                  open_.end, open_.label->args);
    }
    open_.label = nullptr;
  }

  void Push(Task task) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!task.always && Recording() != nullptr) {
      static const auto kUnlabelled =
          std::make_shared<const TraceLabel>(TraceLabel{"work", "other", {}});
      task.label = label_ != nullptr ? label_ : kUnlabelled;
    }
    queue_.push_back(std::move(task));
    ++enqueued_;
    cv_.notify_all();
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      Task task = std::move(queue_.front());
      queue_.pop_front();
      bool skip = !first_error_.ok() && !task.always;
      lock.unlock();
      // A different label (or a record or wait) ends the span of the work before it.
      if (task.label != open_.label) CloseSpan();
      if (item_delay_.count() > 0) std::this_thread::sleep_for(item_delay_);
      const auto start = std::chrono::steady_clock::now();
      Status status = skip ? absl::OkStatus() : task.work();
      const auto end = std::chrono::steady_clock::now();
      ran_us_ += std::chrono::duration_cast<std::chrono::microseconds>(end - start).count();
      if (task.label != nullptr && !skip) {
        if (open_.label == nullptr) open_ = {task.label, start, end};
        open_.end = end;
      }
      lock.lock();
      if (queue_.empty()) {  // going idle: the open span ends here, not at the next work
        lock.unlock();
        CloseSpan();
        lock.lock();
      }
      if (!status.ok() && first_error_.ok()) {
        first_error_ = Annotate(status, absl::StrCat("stream '", name_, "'"));
      }
      ++finished_;
      done_cv_.notify_all();
    }
  }

  const std::string name_;
  StreamRegistry* registry_;  // the device's; outlives the stream
  const std::atomic<Trace*>* trace_;  // the device's
  const std::chrono::microseconds item_delay_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  Status first_error_;
  std::atomic<int64_t> stalled_us_{0};
  std::atomic<int64_t> ran_us_{0};  // every task, waits included
  std::shared_ptr<const TraceLabel> label_;  // under mutex_
  OpenSpan open_;
  int track_ = -1;
  const Trace* track_owner_ = nullptr;
  std::thread worker_;  // last: starts after the members above exist
};

constexpr size_t kAlignment = 4096;
constexpr size_t kHugePageBytes = 2u << 20;

// Memory through a BlockCache per tier, so a steady-state step makes no allocator call (the
// counter the CUDA device keeps for cudaMalloc/cudaFree, checked here). Blocks of 2 MiB and
// more are mappings of their own on 2 MiB boundaries with transparent huge pages asked for:
// direct I/O into them (the NVMe tier's host buffers) runs about 2-3x faster than into
// 4 KiB pages on these machines, and big state arrays take fewer TLB misses. (Not
// aligned_alloc: once a process has freed large blocks, malloc serves later ones from its
// heap, already faulted in 4 KiB pages, where the advice comes too late, and a second engine
// in one process, as in `strata bench plan`, could get its NVMe buffers there.) Smaller
// blocks come from aligned_alloc.
StatusOr<RawBlock> AllocateAligned(size_t class_bytes) {
  if (class_bytes >= kHugePageBytes) {
    void* data = MapAligned(class_bytes, kHugePageBytes);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of system memory (", FormatBytes(class_bytes), ")"));
    }
    ::madvise(data, class_bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
    return RawBlock{data, data, class_bytes};
  }
  void* data = std::aligned_alloc(kAlignment, class_bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of system memory (", FormatBytes(class_bytes), ")"));
  }
  return RawBlock{data, data, class_bytes};
}

// Gives back what AllocateAligned returned.
void FreeAligned(const RawBlock& block) {
  if (block.bytes >= kHugePageBytes) {
    ::munmap(block.base, block.bytes);
  } else {
    std::free(block.base);
  }
}

// A dry run's stream items each wait this long (CpuStream::item_delay).
constexpr int kDryItemDelayUs = 50;

// A dry run's memory: address space only (no swap reserved, never touched).
StatusOr<RawBlock> MapUntouched(size_t class_bytes) {
  void* data = ::mmap(nullptr, class_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of address space (", FormatBytes(class_bytes), ")"));
  }
  return RawBlock{data, data, class_bytes};
}

class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options)
      : dry_run_(options.dry_run),
        dry_run_of_gpu_(options.dry_run && options.dry_run_of_gpu),
        memory_(MemoryOptions(options)) {}

  StatusOr<Buffer> Allocate(Tier tier, StateKind kind, size_t bytes,
                            const std::string& what) override {
    return memory_.Allocate(tier, kind, bytes, what);
  }

  uint64_t driver_calls() const override { return memory_.driver_calls(); }

  std::optional<Tier> TierOf(const void* pointer) const override {
    const uintptr_t at = reinterpret_cast<uintptr_t>(pointer);
    std::lock_guard<std::mutex> lock(ranges_mutex_);
    auto it = ranges_.upper_bound(at);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    if (at >= it->first + it->second.bytes) return std::nullopt;
    return it->second.tier;
  }

  void SetTrace(Trace* trace) override {
    trace_.store(trace);
    memory_.SetTrace(trace);
  }
  Trace* trace() const override { return trace_.load(); }

  StatusOr<std::unique_ptr<Stream>> CreateStream(const std::string& name) override {
    return std::unique_ptr<Stream>(new CpuStream(
        name, &streams_, &trace_, std::chrono::microseconds(dry_run_ ? kDryItemDelayUs : 0)));
  }
  StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::unique_ptr<Event>(new CpuEvent());
  }

  Status Record(Event& event, Stream& stream) override {
    auto& cpu_event = static_cast<CpuEvent&>(event);
    uint64_t generation = cpu_event.NextRecord();
    auto& cpu_stream = static_cast<CpuStream&>(stream);
    {
      std::lock_guard<std::mutex> lock(cpu_event.state()->mutex);
      cpu_event.state()->recorded_on = stream.name();
    }
    cpu_stream.EnqueueAlways([state = cpu_event.state(), generation, &cpu_stream] {
      state->Complete(generation, cpu_stream.error_in_order());
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  Status Wait(Stream& stream, Event& event) override {
    auto& cpu_event = static_cast<CpuEvent&>(event);
    uint64_t generation = cpu_event.LatestRecord();
    if (generation == 0) return absl::OkStatus();
    auto& cpu_stream = static_cast<CpuStream&>(stream);
    // Waits keep their ordering even on a failed stream: work it skips may still free
    // memory (a buffer owned by the skipped task), which must not happen before the other
    // stream is done with it. Waiting for a record made on a failed stream fails this
    // stream too (its later work would read what the failed work did not produce).
    std::string on;
    {
      std::lock_guard<std::mutex> lock(cpu_event.state()->mutex);
      on = cpu_event.state()->recorded_on;
    }
    cpu_stream.EnqueueAlways([state = cpu_event.state(), generation, &cpu_stream, on] {
      const auto start = std::chrono::steady_clock::now();
      Status error = state->WaitFor(generation);
      cpu_stream.AddStall(start, std::chrono::steady_clock::now(), on);
      if (error.ok()) return error;
      return Annotate(error, "waited for an event recorded after this error");
    });
    return absl::OkStatus();
  }

  bool dry_run() const override { return dry_run_; }
  bool InHostMemory(Tier tier) const override {  // both tiers, unless modelling a GPU
    return tier == Tier::kHost || !dry_run_of_gpu_;
  }
  std::array<uint64_t, 3> dry_copy_bytes() const override {
    return {dry_copies_[0].load(), dry_copies_[1].load(), dry_copies_[2].load()};
  }

  Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) override {
    if (dry_run_) {  // counted by direction (memory the device did not allocate: host)
      const Tier to = TierOf(dst).value_or(Tier::kHost);
      const Tier from = TierOf(src).value_or(Tier::kHost);
      const int direction = to == from ? 2 : to == Tier::kDevice ? 0 : 1;
      dry_copies_[direction] += bytes;
      return absl::OkStatus();
    }
    stream.EnqueueHost([dst, src, bytes] {
      if (bytes > 0) std::memcpy(dst, src, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override {
    if (dry_run_) return absl::OkStatus();
    stream.EnqueueHost([dst, value, bytes] {
      if (bytes > 0) std::memset(dst, value, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  MemoryPool& pool(Tier tier) override { return memory_.pool(tier); }

  std::string Describe() const override {
    return absl::StrCat(dry_run_ ? "dry run: " : "", "cpu (device tier capped at ",
                        FormatBytes(memory_.pool(Tier::kDevice).Stats().capacity_bytes), ")");
  }

 private:
  // Each tier through a block cache (a quarter of the tier, at most 4 GiB: enough for a
  // step's transient buffers); every live buffer's range recorded for TierOf.
  TieredMemory::Options MemoryOptions(const CpuDeviceOptions& options) {
    TieredMemory::Options memory;
    for (Tier tier : {Tier::kDevice, Tier::kHost}) {
      TierDriver& driver = tier == Tier::kDevice ? memory.device : memory.host;
      driver.allocate = dry_run_ ? MapUntouched : AllocateAligned;
      driver.free = dry_run_ ? +[](const RawBlock& block) { ::munmap(block.base, block.bytes); }
                             : FreeAligned;
      driver.capacity_bytes =
          tier == Tier::kDevice ? options.device_memory_bytes : options.host_memory_bytes;
      driver.limit_key = tier == Tier::kDevice ? "device.memory_limit" : "tiers.host_memory_limit";
      driver.max_cached_bytes = std::min<uint64_t>(driver.capacity_bytes / 4, 4ull << 30);
    }
    memory.fence = [this] { return streams_.Fence(*this); };
    memory.on_allocated = [this](void* data, size_t bytes, Tier tier) {
      std::lock_guard<std::mutex> lock(ranges_mutex_);
      ranges_[reinterpret_cast<uintptr_t>(data)] = {std::max<size_t>(bytes, 1), tier};
    };
    memory.on_freed = [this](void* data) {
      std::lock_guard<std::mutex> lock(ranges_mutex_);
      ranges_.erase(reinterpret_cast<uintptr_t>(data));
    };
    return memory;
  }

  const bool dry_run_;
  const bool dry_run_of_gpu_;
  std::atomic<uint64_t> dry_copies_[3] = {0, 0, 0};
  StreamRegistry streams_;  // before the memory: the fences use it
  std::atomic<Trace*> trace_{nullptr};
  // Every live buffer's [start, start + bytes) and tier, for TierOf (before the memory,
  // whose buffers are forgotten here as they go).
  struct Range {
    size_t bytes;
    Tier tier;
  };
  mutable std::mutex ranges_mutex_;
  std::map<uintptr_t, Range> ranges_;
  TieredMemory memory_;  // every Buffer must go first
};

}  // namespace

std::unique_ptr<Device> CreateCpuDevice(const CpuDeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

}  // namespace strata
