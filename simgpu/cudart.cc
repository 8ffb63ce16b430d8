// simgpu/cudart.cc: the CUDA runtime double's devices, errors and memory (streams and events
// are in cudart_stream.cc, the driver entry point in cudart_driver.cc, the error table in
// cudart_errors.cc). C functions with the signatures of <cuda_runtime_api.h>, implementing
// on the CPU what strata calls, with the runtime's error codes.
//
// Device memory is mmap'd (page-aligned; PROT_NONE outside operations in blocking mode) and
// counted against the device's STRATA_SIMGPU_MEMORY_BYTES; pinned memory is plain aligned host
// memory whose ranges are recorded for cudaPointerGetAttributes. Every call returns the sticky
// error once there is one. Thread-safety: every function is thread-safe, as CUDA's.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simgpu/runtime_core.h"

using simgpu::runtime::CurrentDevice;
using simgpu::runtime::DeviceAllocation;
using simgpu::runtime::Fail;
using simgpu::runtime::kPageBytes;
using simgpu::runtime::Pointer;
using simgpu::runtime::GetConfig;
using simgpu::runtime::HostRange;
using simgpu::runtime::LastError;
using simgpu::runtime::Runtime;
using simgpu::runtime::Sticky;


namespace {

size_t RoundToPages(size_t bytes) {
  return std::max<size_t>(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
}

// One memory pool per device, the default one; its handle is its address.
struct MemoryPool {
  int device = 0;
  uint64_t release_threshold_bytes = 0;
};

MemoryPool* Pools() {
  static MemoryPool* pools = [] {
    auto* made = new MemoryPool[GetConfig().device_count];
    for (int d = 0; d < GetConfig().device_count; ++d) made[d].device = d;
    return made;
  }();
  return pools;
}

cudaError_t AllocateDevice(int device, size_t bytes, void** pointer, const char* call) {
  Runtime& rt = Runtime::Get();
  const size_t mapped = RoundToPages(bytes);
  std::lock_guard<std::mutex> lock(rt.mutex);
  const size_t total = GetConfig().memory_bytes;
  if (rt.used_bytes[device] + mapped > total) {
    return Fail(cudaErrorMemoryAllocation, call,
                "asked for " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device) +
                    ", which has " + std::to_string(total - rt.used_bytes[device]) +
                    " bytes free of " + std::to_string(total));
  }
  void* base = ::mmap(nullptr, mapped, rt.NewAllocationProtectionLocked(),
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return Fail(cudaErrorMemoryAllocation, call,
                "mmap of " + std::to_string(mapped) + " bytes failed: " + std::strerror(errno));
  }
  DeviceAllocation& allocation = rt.allocations[reinterpret_cast<uintptr_t>(base)];
  allocation.bytes = bytes;
  allocation.mapped_bytes = mapped;
  allocation.device = device;
  rt.used_bytes[device] += mapped;
  *pointer = base;
  return cudaSuccess;
}

// Forgets the allocation at `base` if it is still known; returns its mapped bytes (0 if not).
size_t ForgetDevice(void* base) {
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto it = rt.allocations.find(reinterpret_cast<uintptr_t>(base));
  if (it == rt.allocations.end()) return 0;
  const size_t mapped = it->second.mapped_bytes;
  rt.used_bytes[it->second.device] -= mapped;
  rt.allocations.erase(it);
  return mapped;
}

void FillProperties(cudaDeviceProp& p, int device) {
  std::memset(&p, 0, sizeof(p));
  std::snprintf(p.name, sizeof(p.name), "NVIDIA H200 (simgpu)");
  for (int i = 0; i < 16; ++i) p.uuid.bytes[i] = static_cast<char>(0x5a ^ (i * 7 + device));
  p.totalGlobalMem = GetConfig().memory_bytes;
  p.sharedMemPerBlock = 49152;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
  p.multiProcessorCount = 132;
  p.canMapHostMemory = 1;
  p.surfaceAlignment = 512;
  p.concurrentKernels = 1;
  p.ECCEnabled = 1;
  p.pciBusID = device + 1;
  p.asyncEngineCount = 3;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 6144;
  p.l2CacheSize = 50331648;
  p.persistingL2CacheMaxSize = 32505856;
  p.maxThreadsPerMultiProcessor = 2048;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.sharedMemPerMultiprocessor = 233472;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1;
  p.hostNativeAtomicSupported = 0;
  p.computePreemptionSupported = 1;
  p.cooperativeLaunch = 1;
  p.sharedMemPerBlockOptin = simgpu::runtime::kMaxDynamicSharedBytes;
  p.maxBlocksPerMultiProcessor = 32;
  p.accessPolicyMaxWindowSize = 134213632;
  p.reservedSharedMemPerBlock = 1024;
  p.hostRegisterSupported = 1;
  p.memoryPoolsSupported = 1;
  p.clusterLaunch = 1;
  p.hostNumaId = -1;
  p.deviceNumaId = -1;
}

}  // namespace

extern "C" {

// Errors.

cudaError_t cudaGetLastError() {
  if (cudaError_t sticky = Sticky(); sticky != cudaSuccess) return sticky;
  const cudaError_t error = LastError();
  LastError() = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  if (cudaError_t sticky = Sticky(); sticky != cudaSuccess) return sticky;
  return LastError();
}

// Devices.

cudaError_t cudaGetDeviceCount(int* count) {
  SIMGPU_RETURN_IF_STICKY();
  if (count == nullptr) return Fail(cudaErrorInvalidValue, "cudaGetDeviceCount", "count is null");
  *count = GetConfig().device_count;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  SIMGPU_RETURN_IF_STICKY();
  if (device < 0 || device >= GetConfig().device_count) {
    return Fail(cudaErrorInvalidDevice, "cudaSetDevice",
                "device " + std::to_string(device) + " of " +
                    std::to_string(GetConfig().device_count) + " (STRATA_SIMGPU_DEVICES)");
  }
  CurrentDevice() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  SIMGPU_RETURN_IF_STICKY();
  if (device == nullptr) return Fail(cudaErrorInvalidValue, "cudaGetDevice", "device is null");
  *device = CurrentDevice();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  SIMGPU_RETURN_IF_STICKY();
  if (properties == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaGetDeviceProperties", "properties is null");
  }
  if (device < 0 || device >= GetConfig().device_count) {
    return Fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties",
                "device " + std::to_string(device));
  }
  FillProperties(*properties, device);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  SIMGPU_RETURN_IF_STICKY();
  Runtime::Get().SynchronizeDevice(CurrentDevice());
  return Sticky();
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  SIMGPU_RETURN_IF_STICKY();
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaMemGetInfo", "a result pointer is null");
  }
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  *total_bytes = GetConfig().memory_bytes;
  *free_bytes = *total_bytes - rt.used_bytes[CurrentDevice()];
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute, int value) {
  SIMGPU_RETURN_IF_STICKY();
  if (function == nullptr) {
    return Fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute", "function is null");
  }
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // advice
  if (value < 0 || value > simgpu::runtime::kMaxDynamicSharedBytes) {
    return Fail(cudaErrorInvalidValue, "cudaFuncSetAttribute",
                "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) +
                    " is over the H200's " +
                    std::to_string(simgpu::runtime::kMaxDynamicSharedBytes) + " bytes");
  }
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.dynamic_shared_bytes[function] = value;
  return cudaSuccess;
}

// Device memory.

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr) return Fail(cudaErrorInvalidValue, "cudaMalloc", "devPtr is null");
  if (bytes == 0) {
    *pointer = nullptr;
    return cudaSuccess;
  }
  return AllocateDevice(CurrentDevice(), bytes, pointer, "cudaMalloc");
}

cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr) return Fail(cudaErrorInvalidValue, "cudaMallocAsync", "devPtr is null");
  int device = 0;
  {
    Runtime& rt = Runtime::Get();
    std::lock_guard<std::mutex> lock(rt.mutex);
    auto resolved = rt.ResolveLocked(stream);
    if (resolved == nullptr) {
      return Fail(cudaErrorInvalidResourceHandle, "cudaMallocAsync",
                  "unknown stream " + Pointer(stream));
    }
    device = resolved->device;
  }
  if (bytes == 0) {
    *pointer = nullptr;
    return cudaSuccess;
  }
  return AllocateDevice(device, bytes, pointer, "cudaMallocAsync");
}

cudaError_t cudaFree(void* pointer) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr) return cudaSuccess;
  Runtime& rt = Runtime::Get();
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    auto it = rt.allocations.find(reinterpret_cast<uintptr_t>(pointer));
    if (it != rt.allocations.end()) device = it->second.device;
  }
  if (device < 0) {
    return Fail(cudaErrorInvalidValue, "cudaFree",
                Pointer(pointer) + " is not the start of a device allocation");
  }
  // cudaFree synchronises the device: nothing queued may still use the memory.
  rt.SynchronizeDevice(device);
  SIMGPU_RETURN_IF_STICKY();
  const size_t mapped = ForgetDevice(pointer);
  if (mapped > 0) ::munmap(pointer, mapped);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr) return cudaSuccess;
  Runtime& rt = Runtime::Get();
  size_t bytes = 0, mapped = 0;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    auto it = rt.allocations.find(reinterpret_cast<uintptr_t>(pointer));
    if (it != rt.allocations.end()) {
      bytes = it->second.bytes;
      mapped = it->second.mapped_bytes;
    }
  }
  if (mapped == 0) {
    return Fail(cudaErrorInvalidValue, "cudaFreeAsync",
                Pointer(pointer) + " is not the start of a device allocation");
  }
  // A write of the whole allocation in stream order: a use on another stream that is not
  // ordered before the free is reported as a race.
  simgpu::runtime::Op op;
  op.what = "cudaFreeAsync";
  op.opens_device_memory = false;
  op.work = [pointer, mapped] {
    ForgetDevice(pointer);  // blocking mode: still known here
    ::munmap(pointer, mapped);
    return std::string();
  };
  const cudaError_t queued = rt.Submit(stream, std::move(op), {{pointer, bytes, true}});
  if (queued == cudaErrorInvalidResourceHandle) {
    return Fail(queued, "cudaFreeAsync", "unknown stream " + Pointer(stream));
  }
  if (queued != cudaSuccess) return queued;
  ForgetDevice(pointer);  // later accesses are not ours to check; the address stays mapped
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  SIMGPU_RETURN_IF_STICKY();
  if (pool == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaDeviceGetDefaultMemPool", "memPool is null");
  }
  if (device < 0 || device >= GetConfig().device_count) {
    return Fail(cudaErrorInvalidDevice, "cudaDeviceGetDefaultMemPool",
                "device " + std::to_string(device));
  }
  *pool = reinterpret_cast<cudaMemPool_t>(&Pools()[device]);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  SIMGPU_RETURN_IF_STICKY();
  MemoryPool* pools = Pools();
  auto* ours = reinterpret_cast<MemoryPool*>(pool);
  if (ours < pools || ours >= pools + GetConfig().device_count || value == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute",
                "unknown pool " + Pointer(pool) + " or null value");
  }
  if (attribute == cudaMemPoolAttrReleaseThreshold) {
    ours->release_threshold_bytes = *static_cast<uint64_t*>(value);
  }
  return cudaSuccess;  // the other attributes change nothing here
}

// Pinned host memory.

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr) return Fail(cudaErrorInvalidValue, "cudaHostAlloc", "pHost is null");
  if (flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)) {
    return Fail(cudaErrorInvalidValue, "cudaHostAlloc", "unknown flags " + std::to_string(flags));
  }
  // Heap memory, not mmap: a stream still polling a freed counter reads stale memory rather
  // than faulting (as a GPU would read it).
  void* base = std::aligned_alloc(kPageBytes, RoundToPages(bytes));
  if (base == nullptr) {
    return Fail(cudaErrorMemoryAllocation, "cudaHostAlloc",
                "out of host memory for " + std::to_string(bytes) + " bytes");
  }
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.host_ranges[reinterpret_cast<uintptr_t>(base)] = HostRange{std::max<size_t>(bytes, 1), true};
  *pointer = base;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* pointer) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr) return cudaSuccess;
  Runtime& rt = Runtime::Get();
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    auto it = rt.host_ranges.find(reinterpret_cast<uintptr_t>(pointer));
    if (it == rt.host_ranges.end() || !it->second.allocated) {
      return Fail(cudaErrorInvalidValue, "cudaFreeHost",
                  Pointer(pointer) + " was not returned by cudaHostAlloc");
    }
    rt.host_ranges.erase(it);
  }
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* pointer, size_t bytes, unsigned int flags) {
  SIMGPU_RETURN_IF_STICKY();
  if (pointer == nullptr || bytes == 0) {
    return Fail(cudaErrorInvalidValue, "cudaHostRegister", "null pointer or zero bytes");
  }
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(pointer);
  auto next = rt.host_ranges.lower_bound(begin);
  const bool overlaps_next = next != rt.host_ranges.end() && next->first < begin + bytes;
  const bool overlaps_previous =
      next != rt.host_ranges.begin() && std::prev(next)->first + std::prev(next)->second.bytes > begin;
  if (overlaps_next || overlaps_previous) {
    return Fail(cudaErrorHostMemoryAlreadyRegistered, "cudaHostRegister",
                Pointer(pointer) + " (" + std::to_string(bytes) +
                    " bytes) overlaps pinned memory already registered");
  }
  rt.host_ranges[begin] = HostRange{bytes, false};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* pointer) {
  SIMGPU_RETURN_IF_STICKY();
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto it = rt.host_ranges.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == rt.host_ranges.end() || it->second.allocated) {
    return Fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister",
                Pointer(pointer) + " was not registered with cudaHostRegister");
  }
  rt.host_ranges.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_pointer, void* host_pointer,
                                     unsigned int flags) {
  SIMGPU_RETURN_IF_STICKY();
  if (device_pointer == nullptr || flags != 0) {
    return Fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer", "null pDevice or flags != 0");
  }
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.FindHostLocked(host_pointer) == rt.host_ranges.end()) {
    return Fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer",
                Pointer(host_pointer) + " is not pinned host memory");
  }
  *device_pointer = host_pointer;  // unified addressing: the same address
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  SIMGPU_RETURN_IF_STICKY();
  if (attributes == nullptr) {
    return Fail(cudaErrorInvalidValue, "cudaPointerGetAttributes", "attributes is null");
  }
  std::memset(attributes, 0, sizeof(*attributes));
  Runtime& rt = Runtime::Get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (auto it = rt.FindAllocationLocked(pointer); it != rt.allocations.end()) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = it->second.device;
    attributes->devicePointer = const_cast<void*>(pointer);
    return cudaSuccess;
  }
  if (rt.FindHostLocked(pointer) != rt.host_ranges.end()) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = CurrentDevice();
    attributes->devicePointer = const_cast<void*>(pointer);
    attributes->hostPointer = const_cast<void*>(pointer);
    return cudaSuccess;
  }
  attributes->type = cudaMemoryTypeUnregistered;
  attributes->device = -2;
  attributes->hostPointer = const_cast<void*>(pointer);
  return cudaSuccess;
}

}  // extern "C"
