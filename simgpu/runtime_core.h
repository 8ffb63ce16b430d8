// simgpu/runtime_core.h: the state behind the CUDA runtime double (internal to //simgpu:cudart;
// cudart*.cc are its C faces). One process-wide Runtime holds the configuration read once
// from the environment, the sticky error, device allocations and pinned ranges, streams
// (each an in-order queue run by its own thread in ordering mode), events, and the vector
// clocks that decide, at enqueue time, whether two accesses to device memory are ordered.
//
// Invariants: every stream, event and allocation is reached only through the maps here, under
// Runtime::mutex; an operation's Work never runs with that mutex held. The Runtime is never
// destroyed (stream threads may outlive main's return). Thread-safety: every function is
// thread-safe; the current device and the last (non-sticky) error are per host thread.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simgpu/work.h"

namespace simgpu {
namespace runtime {

enum class Mode { kOrdering, kBlocking };

// Read once from the environment (STRATA_SIMGPU_MODE, _SEED, _DEVICES, _MEMORY_BYTES); a
// malformed value aborts the process naming the variable.
struct Config {
  Mode mode = Mode::kOrdering;
  uint64_t seed = 1;
  int device_count = 1;
  size_t memory_bytes = 0;  // per device
};
const Config& GetConfig();

// The H200's figures (cudaGetDeviceProperties).
constexpr size_t kH200MemoryBytes = 150754820096ull;  // 143,771 MiB, as the driver reports
constexpr int kDefaultDynamicSharedBytes = 48 * 1024;
constexpr int kMaxDynamicSharedBytes = 232448;  // sharedMemPerBlockOptin

// A vector clock: one component per stream (its id) and component 0 for the host; absent
// components are 0.
using Clock = std::vector<uint64_t>;
void Join(Clock& into, const Clock& other);

// An event's latest record: done once the stream reached it.
struct RecordState {
  bool done = false;
  std::chrono::steady_clock::time_point time;
  Clock clock;  // the stream's clock when recorded
};

struct StreamState;

// One queued operation. It runs once the streams in `after_streams` completed the given
// counts and `after_event` (if any) is done; `internal` operations (event records, waits)
// run even after a failed Work, so that nothing waiting on them hangs.
struct Op {
  std::string what;
  Work work;
  cudaError_t failure = cudaErrorLaunchFailure;
  bool internal = false;
  bool opens_device_memory = true;  // blocking mode: open device memory while it runs
  std::vector<std::pair<std::shared_ptr<StreamState>, uint64_t>> after_streams;
  std::shared_ptr<RecordState> after_event;
  Clock merge;  // joined into the operation's clock (cudaStreamWaitEvent: the event's)
  std::shared_ptr<RecordState> records;  // cudaEventRecord: gets the operation's clock
};

struct StreamState {
  int id = 0;  // clock component, never reused
  int device = 0;
  bool legacy = false;        // the device's legacy default stream
  bool non_blocking = false;  // cudaStreamNonBlocking: no implicit sync with legacy
  Clock clock;                // the clock of the latest operation enqueued
  uint64_t enqueued = 0, completed = 0;
  std::deque<Op> queue;
  bool destroyed = false;
};

struct EventState {
  int device = 0;
  unsigned flags = 0;
  std::shared_ptr<RecordState> record;  // null until the first cudaEventRecord
};

// One earlier access to a device allocation, for the race check.
struct AccessRecord {
  uintptr_t begin = 0, end = 0;
  std::shared_ptr<const std::string> what;
  int stream = 0;      // clock component of its stream
  uint64_t epoch = 0;  // that component's value in the operation's clock
};

struct DeviceAllocation {
  size_t bytes = 0;         // as asked
  size_t mapped_bytes = 0;  // whole pages
  int device = 0;
  std::vector<AccessRecord> writes;  // the latest writes
  std::vector<AccessRecord> reads;   // reads since them
};

struct HostRange {
  size_t bytes = 0;
  bool allocated = false;  // cudaHostAlloc (else cudaHostRegister)
};

class Runtime {
 public:
  static Runtime& Get();

  std::mutex mutex;
  std::condition_variable changed;  // a completion, a record, an enqueue
  // Under mutex:
  std::map<uintptr_t, DeviceAllocation> allocations;  // by base
  std::map<uintptr_t, HostRange> host_ranges;         // by base
  std::unordered_map<const void*, std::shared_ptr<StreamState>> streams;
  std::vector<std::shared_ptr<StreamState>> legacy;  // per device, created lazily
  std::unordered_map<const void*, std::shared_ptr<EventState>> events;
  std::unordered_map<const void*, int> dynamic_shared_bytes;
  std::vector<size_t> used_bytes;  // per device
  Clock host_clock;
  int next_stream_id = 1;

  // The stream a handle names (null/cudaStreamLegacy/cudaStreamPerThread: the current
  // device's legacy default stream), or null if unknown or destroyed. Requires mutex.
  std::shared_ptr<StreamState> ResolveLocked(cudaStream_t stream);
  // A new stream with its thread (ordering mode). Requires mutex.
  std::shared_ptr<StreamState> NewStreamLocked(int device, bool legacy, bool non_blocking);
  // The allocation holding ptr, or allocations.end(). Requires mutex.
  std::map<uintptr_t, DeviceAllocation>::iterator FindAllocationLocked(const void* ptr);
  std::map<uintptr_t, HostRange>::iterator FindHostLocked(const void* ptr);

  // Queues `op` on `stream` after stamping its clock and checking `accesses`; in blocking
  // mode runs it now. Returns the sticky error, cudaErrorInvalidResourceHandle, or success.
  // `on`, `sequence` and `clock` (if not null) receive the stream, the operation's place in
  // it (for WaitFor) and its clock.
  cudaError_t Submit(cudaStream_t stream, Op op, const std::vector<Access>& accesses,
                     std::shared_ptr<StreamState>* on = nullptr, uint64_t* sequence = nullptr,
                     Clock* clock = nullptr);
  // Waits until `stream` completed `sequence` operations (ordering mode), then merges
  // `clock` into the host's.
  void WaitFor(const std::shared_ptr<StreamState>& stream, uint64_t sequence, const Clock& clock);
  // Waits for every stream of `device` (all devices if -1) and merges their clocks.
  void SynchronizeDevice(int device);

  // Blocking mode: device memory is readable and writable while at least one operation
  // runs (a count, not a lock held across the work: an NCCL operation may wait for
  // another rank's), PROT_NONE otherwise.
  void OpenDeviceMemory();
  void CloseDeviceMemory();
  // The protection a new device allocation gets. Requires mutex.
  int NewAllocationProtectionLocked() const;

 private:
  Runtime();
  void RunStream(std::shared_ptr<StreamState> stream);
  void RunOp(Op& op);
  // The race check and record update for one access of an operation. Requires mutex.
  void CheckAccessLocked(const Access& access, const std::shared_ptr<const std::string>& what,
                         const StreamState& stream);
  int open_count_ = 0;  // blocking mode: operations running with device memory open; mutex
};

// Errors. Sticky: the process-wide error every later call returns (cudaSuccess if none).
cudaError_t Sticky();
// Makes `error` sticky (first one wins) and prints the message once.
void MakeSticky(cudaError_t error, const std::string& message);
// Whether an operation's Work failed (then queued user work is skipped, as on a dead context).
bool WorkFailed();
// A non-sticky failure of `call`: printed once ("simgpu: <call>: <why>") and recorded as
// the thread's last error. Returns `error`.
cudaError_t Fail(cudaError_t error, const char* call, const std::string& why);
// The thread's last error (cudaGetLastError/cudaPeekAtLastError).
cudaError_t& LastError();
// The thread's current device (cudaSetDevice).
int& CurrentDevice();

// Pages: device allocations are whole pages (mmap), pinned ones page-aligned.
constexpr size_t kPageBytes = 4096;
// A pointer as messages print it ("0x7f...").
std::string Pointer(const void* pointer);

}  // namespace runtime
}  // namespace simgpu

// Every runtime call returns the sticky error first, as the real runtime does after a fault.
#define SIMGPU_RETURN_IF_STICKY()                                                          \
  do {                                                                                     \
    if (cudaError_t sticky = ::simgpu::runtime::Sticky(); sticky != cudaSuccess) return sticky; \
  } while (0)
