// CUDA Device: cudaMalloc'd and pinned buffers counted in capped pools, non-blocking
// streams with sticky errors, timing-free events (the streams and events are in
// cuda_stream.h/.cc). See cuda_device.h.
#include "device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "device/block_cache.h"
#include "device/tiered_memory.h"
#include "device/cuda/cuda_gpu.h"
#include "device/cuda/cuda_native.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream.h"
#include "core/logging.h"
#include "device/stream_registry.h"

namespace strata {

using cuda_internal::Activate;
using cuda_internal::CudaEvent;
using cuda_internal::CudaStream;
using cuda_internal::EventDeleter;
using cuda_internal::EventHandle;
using cuda_internal::Gpu;
using cuda_internal::LogIfError;
using cuda_internal::StreamDeleter;
using cuda_internal::StreamHandle;

namespace {

constexpr size_t kAlignment = 4096;
constexpr size_t kHugePageBytes = 2u << 20;

std::string Address(const void* pointer) { return absl::StrFormat("%p", pointer); }

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
