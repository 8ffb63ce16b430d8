// See host_work.h.
#include "device/cuda/host_work.h"

#include <cuda.h>  // CUresult and the stream-memory-operation flags (no libcuda link)

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "device/cuda/cuda_status.h"

namespace strata {
namespace {

// cuStreamWaitValue32 from the driver, or null with the reason.
void* DriverWaitValue(std::string* why) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(
      "cuStreamWaitValue32", &function, 12000, cudaEnableDefault, &found);
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || function == nullptr) {
    *why = absl::StrCat("the driver has no cuStreamWaitValue32 (", cudaGetErrorString(error), ")");
    cudaGetLastError();
    return nullptr;
  }
  return function;
}

}  // namespace

StatusOr<std::unique_ptr<HostWorkQueue>> HostWorkQueue::Create(int device_id,
                                                               cudaStream_t stream,
                                                               std::string where, Hooks hooks) {
  std::string why;
  void* function = DriverWaitValue(&why);
  if (function == nullptr) return absl::UnavailableError(why);
  auto wait_value = reinterpret_cast<CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned)>(
      function);
  void* counter = nullptr;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(&counter, sizeof(uint32_t), cudaHostAllocMapped),
                       absl::StrCat("allocating the host-work counter of ", where));
  *static_cast<volatile uint32_t*>(counter) = 0;
  void* device_counter = nullptr;
  Status mapped = CUDA_STATUS(cudaHostGetDevicePointer(&device_counter, counter, 0),
                              absl::StrCat("mapping the host-work counter of ", where));
  // A wait already satisfied (0 >= 0): the GPU can wait on host memory, or it says why not.
  if (mapped.ok()) {
    const CUresult probe = wait_value(reinterpret_cast<CUstream>(stream),
                                      reinterpret_cast<CUdeviceptr>(device_counter), 0,
                                      CU_STREAM_WAIT_VALUE_GEQ);
    if (probe != CUDA_SUCCESS) {
      mapped = absl::UnavailableError(absl::StrCat(
          "the GPU cannot wait on host memory (cuStreamWaitValue32: CUresult ", probe, ")"));
    }
  }
  if (!mapped.ok()) {
    cudaFreeHost(counter);
    return mapped;
  }
  return std::unique_ptr<HostWorkQueue>(new HostWorkQueue(
      device_id, stream, std::move(where), std::move(hooks),
      reinterpret_cast<WaitValue>(wait_value), static_cast<volatile uint32_t*>(counter),
      reinterpret_cast<uint64_t>(device_counter)));
}

HostWorkQueue::HostWorkQueue(int device_id, cudaStream_t stream, std::string where, Hooks hooks,
                             WaitValue wait_value, volatile uint32_t* done, uint64_t done_device)
    : device_id_(device_id), stream_(stream), where_(std::move(where)), hooks_(std::move(hooks)),
      wait_value_(wait_value), done_(done), done_device_(done_device), worker_([this] { Run(); }) {}

HostWorkQueue::~HostWorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  worker_.join();
  cudaFreeHost(const_cast<uint32_t*>(done_));
}

Status HostWorkQueue::Enqueue(std::function<Status()> work) {
  std::lock_guard<std::mutex> order(enqueue_mutex_);
  cudaEvent_t before = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&before,
                                                cudaEventDisableTiming | cudaEventBlockingSync),
                       absl::StrCat("enqueueing host work on ", where_));
  Status recorded = CUDA_STATUS(cudaEventRecord(before, stream_),
                                absl::StrCat("enqueueing host work on ", where_));
  if (!recorded.ok()) {
    cudaEventDestroy(before);
    return recorded;
  }
  uint32_t sequence;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sequence = ++enqueued_;
    queue_.push_back({before, std::move(work), sequence});
    cv_.notify_all();
  }
  const int result = wait_value_(stream_, done_device_, sequence, CU_STREAM_WAIT_VALUE_GEQ);
  if (result != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat("cuStreamWaitValue32 failed (CUresult ", result,
                                            ") ordering host work on ", where_));
  }
  return absl::OkStatus();
}

void HostWorkQueue::Run() {
  bool activated = false;
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything ran
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!activated) {
      if (cudaSetDevice(device_id_) != cudaSuccess) {
        hooks_.fail(absl::InternalError(absl::StrCat("selecting GPU ", device_id_, " for the "
                                                     "host work of ", where_)));
      }
      activated = true;
    }
    Status waited = CUDA_STATUS(cudaEventSynchronize(item.before),
                                absl::StrCat("waiting for the work before host work on ", where_));
    cudaEventDestroy(item.before);
    if (!waited.ok()) hooks_.fail(waited);
    if (!hooks_.failed()) {
      Status status = item.work();
      if (!status.ok()) hooks_.fail(status);
    }
    // Ran or skipped: the stream's later work may go (release: the work's writes first).
    std::atomic_thread_fence(std::memory_order_release);
    *done_ = item.sequence;
  }
}

}  // namespace strata
