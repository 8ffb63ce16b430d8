// simgpu/cudart_stream.cc: the CUDA runtime double's streams, events, host functions, copies
// and memsets (<cuda_runtime_api.h> signatures). Each is an operation of runtime_core.h: in
// ordering mode queued on the stream's thread and checked against the streams' vector
// clocks; in blocking mode run at once. Synchronising calls merge the clock of the work
// they waited for into the host's, which is what orders the host's later operations.
// Thread-safety: every function is thread-safe, as CUDA's.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "simgpu/runtime_core.h"

using simgpu::Access;
using simgpu::runtime::Clock;
using simgpu::runtime::CurrentDevice;
using simgpu::runtime::EventState;
using simgpu::runtime::Fail;
using simgpu::runtime::Pointer;
using simgpu::runtime::Join;
using simgpu::runtime::Op;
using simgpu::runtime::RecordState;
using simgpu::runtime::Runtime;
using simgpu::runtime::StreamState;
using simgpu::runtime::Sticky;


namespace {

// Submits and turns an unknown stream into the runtime's error for `call`.
cudaError_t SubmitFor(const char* call, cudaStream_t stream, Op op,
                      const std::vector<Access>& accesses,
                      std::shared_ptr<StreamState>* on = nullptr, uint64_t* sequence = nullptr,
                      Clock* clock = nullptr) {
  const cudaError_t error =
      Runtime::Get().Submit(stream, std::move(op), accesses, on, sequence, clock);
  if (error == cudaErrorInvalidResourceHandle) {
    return Fail(error, call, "unknown or destroyed stream " + Pointer(stream));
  }
  return error;
}

std::shared_ptr<EventState> FindEventLocked(Runtime& rt, cudaEvent_t event) {
  auto it = rt.events.find(event);
  return it == rt.events.end() ? nullptr : it->second;
}

// Whether `pointer` is neither device memory nor pinned: the runtime copies such memory
// synchronously with respect to the host.
bool Pageable(const void* pointer) {
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  return rt.FindAllocationLocked(pointer) == rt.allocations.end() &&
         rt.FindHostLocked(pointer) == rt.host_ranges.end();
}

}  // namespace

extern "C" {

// Streams.

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  SIMGPU_RETURN_IF_STICKY();
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) {
    return Fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags", "null pStream or bad flags");
  }
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  std::shared_ptr<StreamState> made =
      rt.NewStreamLocked(CurrentDevice(), false, (flags & cudaStreamNonBlocking) != 0);
  *stream = reinterpret_cast<cudaStream_t>(made.get());
  rt.streams[made.get()] = std::move(made);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

// Returns at once; the stream's thread finishes what was queued, then ends (as CUDA frees
// a stream's resources once its work completed).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto it = rt.streams.find(stream);
  if (it == rt.streams.end()) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy",
                "unknown stream " + Pointer(stream));
  }
  it->second->destroyed = true;
  rt.streams.erase(it);
  rt.changed.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::shared_ptr<StreamState> resolved;
  uint64_t sequence = 0;
  Clock clock;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    resolved = rt.ResolveLocked(stream);
    if (resolved != nullptr) {
      sequence = resolved->enqueued;
      clock = resolved->clock;
    }
  }
  if (resolved == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize",
                "unknown stream " + Pointer(stream));
  }
  rt.WaitFor(resolved, sequence, clock);
  return Sticky();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  std::shared_ptr<StreamState> resolved = rt.ResolveLocked(stream);
  if (resolved == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery",
                "unknown stream " + Pointer(stream));
  }
  if (resolved->completed < resolved->enqueued) return cudaErrorNotReady;
  Join(rt.host_clock, resolved->clock);
  return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  SIMGPU_RETURN_IF_STICKY();
  if (device == nullptr) return Fail(cudaErrorInvalidValue, "cudaStreamGetDevice", "device is null");
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  std::shared_ptr<StreamState> resolved = rt.ResolveLocked(stream);
  if (resolved == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamGetDevice",
                "unknown stream " + Pointer(stream));
  }
  *device = resolved->device;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  SIMGPU_RETURN_IF_STICKY();
  if ((flags & ~cudaEventWaitExternal) != 0) {
    return Fail(cudaErrorInvalidValue, "cudaStreamWaitEvent", "unknown flags");
  }
  Runtime& rt = Runtime::Get();
  Op op;
  op.what = "cudaStreamWaitEvent";
  op.internal = true;
  op.opens_device_memory = false;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    std::shared_ptr<EventState> found = FindEventLocked(rt, event);
    if (found == nullptr) {
      return Fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent",
                  "unknown event " + Pointer(event));
    }
    if (rt.ResolveLocked(stream) == nullptr) {
      return Fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent",
                  "unknown stream " + Pointer(stream));
    }
    if (found->record == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
    op.after_event = found->record;
    op.merge = found->record->clock;
  }
  return SubmitFor("cudaStreamWaitEvent", stream, std::move(op), {});
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* user_data) {
  SIMGPU_RETURN_IF_STICKY();
  if (function == nullptr) return Fail(cudaErrorInvalidValue, "cudaLaunchHostFunc", "fn is null");
  Op op;
  op.what = "cudaLaunchHostFunc";
  op.opens_device_memory = false;  // a host function must not touch device memory
  op.work = [function, user_data] {
    function(user_data);
    return std::string();
  };
  return SubmitFor("cudaLaunchHostFunc", stream, std::move(op), {});
}

// Events.

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  SIMGPU_RETURN_IF_STICKY();
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~known) != 0 ||
      ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))) {
    return Fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags", "null event or bad flags");
  }
  auto made = std::make_shared<EventState>();
  made->device = CurrentDevice();
  made->flags = flags;
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  *event = reinterpret_cast<cudaEvent_t>(made.get());
  rt.events[made.get()] = std::move(made);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.events.erase(event) == 0) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy",
                "unknown event " + Pointer(event));
  }
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::shared_ptr<EventState> found;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    found = FindEventLocked(rt, event);
  }
  if (found == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventRecord",
                "unknown event " + Pointer(event));
  }
  auto record = std::make_shared<RecordState>();
  Op op;
  op.what = "cudaEventRecord";
  op.internal = true;
  op.opens_device_memory = false;
  op.records = record;
  op.work = [record] {
    Runtime& runtime = Runtime::Get();
    std::lock_guard<std::mutex> lock(runtime.mutex);
    record->time = std::chrono::steady_clock::now();
    record->done = true;
    runtime.changed.notify_all();
    return std::string();
  };
  const cudaError_t queued = SubmitFor("cudaEventRecord", stream, std::move(op), {});
  if (queued != cudaSuccess) return queued;
  std::lock_guard<std::mutex> lock(rt.mutex);
  found->record = std::move(record);
  return cudaSuccess;
}

// cudaErrorNotReady is an answer, not an error: it is not recorded as the last error.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  std::shared_ptr<EventState> found = FindEventLocked(rt, event);
  if (found == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventQuery",
                "unknown event " + Pointer(event));
  }
  if (found->record == nullptr) return cudaSuccess;
  if (!found->record->done) return cudaErrorNotReady;
  Join(rt.host_clock, found->record->clock);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::unique_lock<std::mutex> lock(rt.mutex);
  std::shared_ptr<EventState> found = FindEventLocked(rt, event);
  if (found == nullptr) {
    lock.unlock();
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize",
                "unknown event " + Pointer(event));
  }
  std::shared_ptr<RecordState> record = found->record;
  if (record == nullptr) return cudaSuccess;
  rt.changed.wait(lock, [&] { return record->done; });
  Join(rt.host_clock, record->clock);
  lock.unlock();
  return Sticky();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  SIMGPU_RETURN_IF_STICKY();
  if (ms == nullptr) return Fail(cudaErrorInvalidValue, "cudaEventElapsedTime", "ms is null");
  Runtime& rt = Runtime::Get();
  std::unique_lock<std::mutex> lock(rt.mutex);
  std::shared_ptr<EventState> first = FindEventLocked(rt, start);
  std::shared_ptr<EventState> last = FindEventLocked(rt, end);
  std::string why;
  if (first == nullptr || last == nullptr) {
    why = "unknown event";
  } else if ((first->flags | last->flags) & cudaEventDisableTiming) {
    why = "an event was created with cudaEventDisableTiming";
  } else if (first->record == nullptr || last->record == nullptr) {
    why = "an event was never recorded";
  }
  if (!why.empty()) {
    lock.unlock();
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime", why);
  }
  if (!first->record->done || !last->record->done) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(last->record->time - first->record->time).count();
  return cudaSuccess;
}

// Copies and memsets.

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return Fail(cudaErrorInvalidMemcpyDirection, "cudaMemcpyAsync",
                "kind " + std::to_string(static_cast<int>(kind)));
  }
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaMemcpyAsync", "null dst or src");
  }
  // Pageable host memory is copied synchronously, as the runtime does (it stages it).
  const bool synchronous = Pageable(dst) || Pageable(src);
  Op op;
  op.what = "cudaMemcpyAsync";
  op.work = [dst, src, bytes] {
    std::memmove(dst, src, bytes);
    return std::string();
  };
  std::shared_ptr<StreamState> on;
  uint64_t sequence = 0;
  Clock clock;
  const cudaError_t queued = SubmitFor("cudaMemcpyAsync", stream, std::move(op),
                                       {{src, bytes, false}, {dst, bytes, true}}, &on, &sequence,
                                       &clock);
  if (queued != cudaSuccess || !synchronous) return queued;
  Runtime::Get().WaitFor(on, sequence, clock);
  return Sticky();
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (pointer == nullptr) return Fail(cudaErrorInvalidValue, "cudaMemsetAsync", "devPtr is null");
  Op op;
  op.what = "cudaMemsetAsync";
  op.work = [pointer, value, bytes] {
    std::memset(pointer, value, bytes);
    return std::string();
  };
  return SubmitFor("cudaMemsetAsync", stream, std::move(op), {{pointer, bytes, true}});
}

}  // extern "C"
