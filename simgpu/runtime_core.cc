// simgpu/runtime_core.cc: the Runtime of runtime_core.h: configuration, errors, stream threads,
// the vector-clock race check, and work.h's functions on top of them.
//
// Why clocks and not timing: a race must be reported the same way on every run, so it is
// decided when an operation is enqueued, from what the host has told the runtime about
// ordering (events, waits, synchronisations), never from which thread happened to run first.
#include "simgpu/runtime_core.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

namespace simgpu {
namespace runtime {
namespace {


std::atomic<int> g_sticky{cudaSuccess};
std::atomic<bool> g_work_failed{false};

[[noreturn]] void BadEnvironment(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "simgpu: %s=%s is not %s\n", name, value, expected);
  std::abort();
}

// A whole decimal number in [minimum, maximum] (no sign, no suffix, no overflow).
uint64_t ParseNumber(const char* name, const char* value, uint64_t minimum, uint64_t maximum,
                     const char* expected) {
  if (*value == '\0') BadEnvironment(name, value, expected);
  uint64_t number = 0;
  for (const char* c = value; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') BadEnvironment(name, value, expected);
    const uint64_t digit = static_cast<uint64_t>(*c - '0');
    if (number > (UINT64_MAX - digit) / 10) BadEnvironment(name, value, expected);
    number = number * 10 + digit;
  }
  if (number < minimum || number > maximum) BadEnvironment(name, value, expected);
  return number;
}

Config ReadConfig() {
  Config config;
  config.memory_bytes = kH200MemoryBytes;
  if (const char* mode = std::getenv("STRATA_SIMGPU_MODE"); mode != nullptr && *mode != '\0') {
    if (std::strcmp(mode, "blocking") == 0) {
      config.mode = Mode::kBlocking;
    } else if (std::strcmp(mode, "ordering") != 0) {
      BadEnvironment("STRATA_SIMGPU_MODE", mode, "'ordering' or 'blocking'");
    }
  }
  if (const char* seed = std::getenv("STRATA_SIMGPU_SEED"); seed != nullptr) {
    config.seed = ParseNumber("STRATA_SIMGPU_SEED", seed, 0, UINT64_MAX, "a whole number");
  }
  if (const char* devices = std::getenv("STRATA_SIMGPU_DEVICES"); devices != nullptr) {
    config.device_count = static_cast<int>(
        ParseNumber("STRATA_SIMGPU_DEVICES", devices, 1, 64, "a device count from 1 to 64"));
  }
  if (const char* bytes = std::getenv("STRATA_SIMGPU_MEMORY_BYTES"); bytes != nullptr) {
    config.memory_bytes = ParseNumber("STRATA_SIMGPU_MEMORY_BYTES", bytes, 1, uint64_t{1} << 50,
                                      "a byte count from 1 to 2^50");
  }
  return config;
}

// Removes [begin, end) from every record, keeping the parts outside it.
void Cut(std::vector<AccessRecord>& records, uintptr_t begin, uintptr_t end) {
  std::vector<AccessRecord> kept;
  kept.reserve(records.size() + 1);
  for (AccessRecord& record : records) {
    if (record.end <= begin || record.begin >= end) {
      kept.push_back(std::move(record));
      continue;
    }
    if (record.begin < begin) {
      AccessRecord left = record;
      left.end = begin;
      kept.push_back(std::move(left));
    }
    if (record.end > end) {
      AccessRecord right = record;
      right.begin = end;
      kept.push_back(std::move(right));
    }
  }
  records.swap(kept);
}

}  // namespace

const Config& GetConfig() {
  static const Config config = ReadConfig();
  return config;
}

void Join(Clock& into, const Clock& other) {
  if (into.size() < other.size()) into.resize(other.size(), 0);
  for (size_t i = 0; i < other.size(); ++i) into[i] = std::max(into[i], other[i]);
}

cudaError_t Sticky() { return static_cast<cudaError_t>(g_sticky.load(std::memory_order_acquire)); }

void MakeSticky(cudaError_t error, const std::string& message) {
  // The report is printed before the error becomes visible: a caller that sees the sticky code
  // and exits at once must not cut the report off (the worker thread prints it).
  static std::mutex report;
  std::lock_guard<std::mutex> lock(report);
  if (g_sticky.load(std::memory_order_acquire) != cudaSuccess) return;
  std::fprintf(stderr, "simgpu: %s (every later CUDA call returns %s)\n", message.c_str(),
               cudaGetErrorName(error));
  std::fflush(stderr);
  g_sticky.store(error, std::memory_order_release);
}

bool WorkFailed() { return g_work_failed.load(std::memory_order_acquire); }

cudaError_t Fail(cudaError_t error, const char* call, const std::string& why) {
  std::fprintf(stderr, "simgpu: %s: %s (%s)\n", call, why.c_str(), cudaGetErrorName(error));
  LastError() = error;
  return error;
}

cudaError_t& LastError() {
  thread_local cudaError_t error = cudaSuccess;
  return error;
}

int& CurrentDevice() {
  thread_local int device = 0;
  return device;
}

std::string Pointer(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

Runtime& Runtime::Get() {
  static Runtime* runtime = new Runtime();  // never destroyed: stream threads may outlive main
  return *runtime;
}

Runtime::Runtime() {
  const Config& config = GetConfig();
  legacy.resize(config.device_count);
  used_bytes.resize(config.device_count, 0);
  host_clock.assign(1, 0);
}

std::shared_ptr<StreamState> Runtime::ResolveLocked(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    const int device = CurrentDevice();
    if (legacy[device] == nullptr) legacy[device] = NewStreamLocked(device, true, false);
    return legacy[device];
  }
  auto it = streams.find(stream);
  if (it == streams.end() || it->second->destroyed) return nullptr;
  return it->second;
}

std::shared_ptr<StreamState> Runtime::NewStreamLocked(int device, bool is_legacy,
                                                      bool non_blocking) {
  auto stream = std::make_shared<StreamState>();
  stream->id = next_stream_id++;
  stream->device = device;
  stream->legacy = is_legacy;
  stream->non_blocking = non_blocking;
  stream->clock.assign(stream->id + 1, 0);
  if (GetConfig().mode == Mode::kOrdering) {
    std::thread([this, stream] { RunStream(stream); }).detach();
  }
  return stream;
}

std::map<uintptr_t, DeviceAllocation>::iterator Runtime::FindAllocationLocked(const void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return allocations.end();
  --it;
  const size_t extent = std::max<size_t>(it->second.bytes, 1);
  return address < it->first + extent ? it : allocations.end();
}

std::map<uintptr_t, HostRange>::iterator Runtime::FindHostLocked(const void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  auto it = host_ranges.upper_bound(address);
  if (it == host_ranges.begin()) return host_ranges.end();
  --it;
  return address < it->first + std::max<size_t>(it->second.bytes, 1) ? it : host_ranges.end();
}

void Runtime::RunOp(Op& op) {
  if (!op.internal && WorkFailed()) return;  // a dead context runs nothing more
  const bool open = GetConfig().mode == Mode::kBlocking && op.opens_device_memory;
  if (open) OpenDeviceMemory();
  std::string message;
  try {
    message = op.work ? op.work() : std::string();
  } catch (const std::exception& e) {
    message = std::string("threw ") + e.what();
  }
  if (open) CloseDeviceMemory();
  if (!message.empty()) {
    g_work_failed.store(true, std::memory_order_release);
    MakeSticky(op.failure, op.what + " failed: " + message);
  }
}

void Runtime::RunStream(std::shared_ptr<StreamState> stream) {
  CurrentDevice() = stream->device;
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    changed.wait(lock, [&] { return !stream->queue.empty() || stream->destroyed; });
    if (stream->queue.empty()) return;  // destroyed, and everything ran
    Op& op = stream->queue.front();     // deque: stays put while others push_back
    changed.wait(lock, [&] {
      for (const auto& [other, count] : op.after_streams) {
        if (other->completed < count) return false;
      }
      return op.after_event == nullptr || op.after_event->done;
    });
    lock.unlock();
    RunOp(op);
    lock.lock();
    stream->queue.pop_front();
    ++stream->completed;
    changed.notify_all();
  }
}

cudaError_t Runtime::Submit(cudaStream_t handle, Op op, const std::vector<Access>& accesses,
                            std::shared_ptr<StreamState>* on, uint64_t* sequence,
                            Clock* stamped) {
  if (cudaError_t sticky = Sticky(); sticky != cudaSuccess) return sticky;
  std::unique_lock<std::mutex> lock(mutex);
  std::shared_ptr<StreamState> stream = ResolveLocked(handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  if (on != nullptr) *on = stream;
  if (GetConfig().mode == Mode::kBlocking) {
    ++stream->enqueued;
    if (sequence != nullptr) *sequence = stream->enqueued;
    lock.unlock();
    RunOp(op);
    lock.lock();
    ++stream->completed;
    return cudaSuccess;
  }
  // The operation's clock: after everything on its stream, everything the host has seen
  // complete, what it waits for, and (implicit legacy-stream synchronisation) the work of
  // the blocking streams it is ordered with.
  Clock clock = stream->clock;
  Join(clock, host_clock);
  Join(clock, op.merge);
  if (stream->legacy) {
    for (const auto& [key, other] : streams) {
      if (other->device != stream->device || other->non_blocking || other->destroyed) continue;
      Join(clock, other->clock);
      op.after_streams.emplace_back(other, other->enqueued);
    }
  } else if (!stream->non_blocking && legacy[stream->device] != nullptr) {
    const std::shared_ptr<StreamState>& other = legacy[stream->device];
    Join(clock, other->clock);
    op.after_streams.emplace_back(other, other->enqueued);
  }
  if (clock.size() <= static_cast<size_t>(stream->id)) clock.resize(stream->id + 1, 0);
  ++clock[stream->id];
  stream->clock = std::move(clock);
  if (op.records != nullptr) op.records->clock = stream->clock;
  if (stamped != nullptr) *stamped = stream->clock;
  if (!accesses.empty()) {
    auto what = std::make_shared<const std::string>(op.what);
    for (const Access& access : accesses) CheckAccessLocked(access, what, *stream);
  }
  stream->queue.push_back(std::move(op));
  ++stream->enqueued;
  if (sequence != nullptr) *sequence = stream->enqueued;
  changed.notify_all();
  return cudaSuccess;
}

void Runtime::CheckAccessLocked(const Access& access, const std::shared_ptr<const std::string>& what,
                                const StreamState& stream) {
  auto it = FindAllocationLocked(access.ptr);
  if (it == allocations.end()) return;  // host memory, or not memory of ours: not checked
  const uintptr_t base = it->first;
  DeviceAllocation& allocation = it->second;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(access.ptr);
  uintptr_t end = access.bytes == 0 ? (begin / kPageBytes + 1) * kPageBytes : begin + access.bytes;
  end = std::min<uintptr_t>(end, base + allocation.mapped_bytes);
  if (end <= begin) return;
  const Clock& clock = stream.clock;
  auto ordered = [&](const AccessRecord& earlier) {
    return static_cast<size_t>(earlier.stream) < clock.size() &&
           clock[earlier.stream] >= earlier.epoch;
  };
  auto check = [&](const std::vector<AccessRecord>& records) {
    for (const AccessRecord& earlier : records) {
      if (earlier.end <= begin || earlier.begin >= end || ordered(earlier)) continue;
      char where[64];
      std::snprintf(where, sizeof(where), "%p+%" PRIuPTR, reinterpret_cast<void*>(base),
                    std::max(earlier.begin, begin) - base);
      MakeSticky(cudaErrorLaunchFailure,
                 std::string("race on device allocation ") + where + ": " + *earlier.what +
                     " on stream " + std::to_string(earlier.stream) + " and " + *what +
                     " on stream " + std::to_string(stream.id) +
                     " are not ordered (add a cudaStreamWaitEvent on an event recorded after "
                     "the first, or synchronise the host between them)");
      return;
    }
  };
  check(allocation.writes);
  if (access.write) check(allocation.reads);
  AccessRecord record{begin, end, what, stream.id, clock[stream.id]};
  if (access.write) {
    Cut(allocation.writes, begin, end);
    Cut(allocation.reads, begin, end);
    allocation.writes.push_back(std::move(record));
  } else {
    // An earlier read on the same stream inside this one is implied by it.
    allocation.reads.erase(
        std::remove_if(allocation.reads.begin(), allocation.reads.end(),
                       [&](const AccessRecord& r) {
                         return r.stream == stream.id && r.begin >= begin && r.end <= end;
                       }),
        allocation.reads.end());
    allocation.reads.push_back(std::move(record));
  }
}

void Runtime::WaitFor(const std::shared_ptr<StreamState>& stream, uint64_t sequence,
                      const Clock& clock) {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] { return stream->completed >= sequence; });
  Join(host_clock, clock);
}

void Runtime::SynchronizeDevice(int device) {
  std::vector<std::pair<std::shared_ptr<StreamState>, uint64_t>> targets;
  std::unique_lock<std::mutex> lock(mutex);
  Clock seen;
  auto add = [&](const std::shared_ptr<StreamState>& stream) {
    if (stream == nullptr || (device >= 0 && stream->device != device)) return;
    targets.emplace_back(stream, stream->enqueued);
    Join(seen, stream->clock);
  };
  for (const auto& [key, stream] : streams) add(stream);
  for (const auto& stream : legacy) add(stream);
  changed.wait(lock, [&] {
    for (const auto& [stream, count] : targets) {
      if (stream->completed < count) return false;
    }
    return true;
  });
  Join(host_clock, seen);
}

void Runtime::OpenDeviceMemory() {
  std::lock_guard<std::mutex> lock(mutex);
  if (open_count_++ > 0) return;
  for (const auto& [base, allocation] : allocations) {
    ::mprotect(reinterpret_cast<void*>(base), allocation.mapped_bytes, PROT_READ | PROT_WRITE);
  }
}

void Runtime::CloseDeviceMemory() {
  std::lock_guard<std::mutex> lock(mutex);
  if (--open_count_ > 0) return;
  for (const auto& [base, allocation] : allocations) {
    ::mprotect(reinterpret_cast<void*>(base), allocation.mapped_bytes, PROT_NONE);
  }
}

int Runtime::NewAllocationProtectionLocked() const {
  return GetConfig().mode == Mode::kBlocking && open_count_ == 0 ? PROT_NONE
                                                                 : PROT_READ | PROT_WRITE;
}

}  // namespace runtime

// work.h

cudaError_t Enqueue(cudaStream_t stream, std::string what, std::vector<Access> accesses, Work work,
                    cudaError_t failure) {
  runtime::Op op;
  op.what = std::move(what);
  op.work = std::move(work);
  op.failure = failure;
  return runtime::Runtime::Get().Submit(stream, std::move(op), accesses);
}

void SetLaunchError(cudaError_t error) { runtime::LastError() = error; }

Range FindDeviceAllocation(const void* ptr) {
  runtime::Runtime& rt = runtime::Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto it = rt.FindAllocationLocked(ptr);
  if (it == rt.allocations.end()) return {};
  return {reinterpret_cast<void*>(it->first), it->second.bytes};
}

int MaxDynamicSharedBytes(const void* kernel) {
  runtime::Runtime& rt = runtime::Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto it = rt.dynamic_shared_bytes.find(kernel);
  return it == rt.dynamic_shared_bytes.end() ? runtime::kDefaultDynamicSharedBytes : it->second;
}

uint64_t Seed() { return runtime::GetConfig().seed; }

namespace {

int CurrentDeviceForApi() { return runtime::CurrentDevice(); }
int DeviceCountForApi() { return runtime::GetConfig().device_count; }

const Api kApi = {kApiVersion, &Enqueue, &FindDeviceAllocation, &CurrentDeviceForApi,
                  &DeviceCountForApi};

}  // namespace
}  // namespace simgpu

extern "C" const simgpu::Api* simgpu_api() { return &simgpu::kApi; }
