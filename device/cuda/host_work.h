// Host work of one CUDA stream on a thread of its own. cudaLaunchHostFunc runs every host
// function of a process on one driver thread, forbids CUDA calls in them, and makes one
// stream's host work (a CPU Adam chunk) hold up every other stream's (an NVMe wait), which
// can deadlock when those depend on each other through events. Here each stream's host work
// runs on the stream's worker, in stream order: the worker waits for an event recorded
// where the work was enqueued (everything before it on the stream), runs the work, then
// writes its sequence number to a pinned, device-mapped counter; the stream's later device
// work waits on that counter with a stream memory operation (cuStreamWaitValue32, reached
// through cudaGetDriverEntryPointByVersion, so nothing links libcuda). Host work may call
// CUDA and enqueue device work. Where the GPU cannot wait on host memory, Create says why
// and the stream keeps cudaLaunchHostFunc.
// Thread-safety: Enqueue from the stream's host thread(s), serialized inside; the worker is
// internal. The stream must be synchronized (every wait satisfied) before destruction.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"

namespace strata {

class HostWorkQueue {
 public:
  struct Hooks {
    std::function<bool()> failed;             // true: skip the work (sticky stream error)
    std::function<void(const Status&)> fail;  // a failure of the work or of CUDA
  };
  // The queue of `stream` on GPU `device_id`; `where` names the stream in errors.
  static StatusOr<std::unique_ptr<HostWorkQueue>> Create(int device_id, cudaStream_t stream,
                                                         std::string where, Hooks hooks);
  ~HostWorkQueue();
  HostWorkQueue(const HostWorkQueue&) = delete;
  HostWorkQueue& operator=(const HostWorkQueue&) = delete;

  // `work` after everything enqueued on the stream so far; the stream's later work waits
  // for it to have run (or been skipped).
  Status Enqueue(std::function<Status()> work);

 private:
  struct Item {
    cudaEvent_t before;
    std::function<Status()> work;
    uint32_t sequence;
  };
  using WaitValue = int (*)(void* stream, uint64_t address, uint32_t value, unsigned flags);

  HostWorkQueue(int device_id, cudaStream_t stream, std::string where, Hooks hooks,
                WaitValue wait_value, volatile uint32_t* done, uint64_t done_device);
  void Run();

  const int device_id_;
  cudaStream_t stream_;
  const std::string where_;
  Hooks hooks_;
  WaitValue wait_value_;
  volatile uint32_t* done_;  // pinned, mapped: the last sequence run
  uint64_t done_device_;     // its device address
  std::mutex enqueue_mutex_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  uint32_t enqueued_ = 0;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after the members above exist
};

}  // namespace strata
