// simgpu/cudart_driver.cc: the one driver function strata reaches, cuStreamWaitValue32, and
// cudaGetDriverEntryPointByVersion that hands it out (strata asks for it by name with
// version 12000; there is no libcuda to link). The wait is a stream operation that polls the
// 32-bit host word with a short sleep, as the GPU's front end polls it over the bus.
// Thread-safety: both functions are thread-safe.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "simgpu/runtime_core.h"

namespace {

constexpr unsigned kWaitKinds = 0x3;  // GEQ, EQ, AND, NOR

bool Satisfied(uint32_t current, uint32_t value, unsigned kind) {
  switch (kind) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<int32_t>(current - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return current == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (current & value) != 0;
    default:  // CU_STREAM_WAIT_VALUE_NOR
      return ~(current | value) != 0;
  }
}

}  // namespace

extern "C" {

// cuda.h maps the name to cuStreamWaitValue32_v2; the function pointer is what matters.
CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr address, cuuint32_t value,
                             unsigned int flags) {
  if (simgpu::runtime::Sticky() != cudaSuccess) return CUDA_ERROR_LAUNCH_FAILED;
  const unsigned kind = flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH);
  if (address == 0 || kind > kWaitKinds || address % sizeof(uint32_t) != 0) {
    simgpu::runtime::Fail(cudaErrorInvalidValue, "cuStreamWaitValue32",
                          "null or misaligned address, or unknown flags");
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto* word = reinterpret_cast<const std::atomic<uint32_t>*>(address);
  simgpu::runtime::Op op;
  op.what = "cuStreamWaitValue32";
  op.internal = true;  // stops polling once the device has failed, so nothing hangs on it
  op.opens_device_memory = false;
  op.work = [word, value, kind] {
    while (!Satisfied(word->load(std::memory_order_acquire), value, kind)) {
      if (simgpu::runtime::Sticky() != cudaSuccess) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return std::string();
  };
  const cudaError_t queued = simgpu::runtime::Runtime::Get().Submit(
      reinterpret_cast<cudaStream_t>(stream), std::move(op), {});
  if (queued == cudaErrorInvalidResourceHandle) {
    simgpu::runtime::Fail(queued, "cuStreamWaitValue32", "unknown or destroyed stream");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return queued == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                             unsigned int cuda_version, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status) {
  if (cudaError_t sticky = simgpu::runtime::Sticky(); sticky != cudaSuccess) return sticky;
  if (symbol == nullptr || function == nullptr) {
    return simgpu::runtime::Fail(cudaErrorInvalidValue, "cudaGetDriverEntryPointByVersion",
                                 "null symbol or funcPtr");
  }
  *function = nullptr;
  cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
  if (std::strcmp(symbol, "cuStreamWaitValue32") == 0) {
    // The _v2 form (the only one since CUDA 12.0) exists from 11.7 on.
    if (cuda_version >= 11070) {
      *function = reinterpret_cast<void*>(&cuStreamWaitValue32);
      result = cudaDriverEntryPointSuccess;
    } else {
      result = cudaDriverEntryPointVersionNotSufficent;
    }
  }
  if (status != nullptr) *status = result;
  return cudaSuccess;
}

}  // extern "C"
