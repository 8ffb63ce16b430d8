// CUDA runtime results as Status, at the call site. Every CUDA call in strata goes through
// CUDA_RETURN_IF_ERROR (or CudaStatus for calls whose error is kept rather than returned),
// so an error names the call, where it was made and what it was doing:
//   "allocating 1.00 GiB for unit 3 params on GPU 0: cudaMalloc(&base, allocated_bytes)
//    failed: out of memory (cudaErrorMemoryAllocation = 2) at device/cuda/cuda_device.cc:120"
// Only built where CUDA is (it includes cudart's header).
// Thread-safety: stateless; cudaGetErrorString/Name are thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"

namespace strata {

// OK for cudaSuccess; otherwise a Status whose code follows the error (out of memory ->
// kResourceExhausted, bad argument -> kInvalidArgument, no usable GPU or driver ->
// kUnavailable, else kInternal) and whose message is
// "<context>: <call> failed: <description> (<name> = <number>) at <file>:<line>".
// Also clears the calling thread's last CUDA error, which this Status now reports.
Status CudaStatus(cudaError_t error, const char* call, const char* file, int line,
                  const std::string& context);

}  // namespace strata

// Evaluates the CUDA call once; returns its error as a Status from the enclosing function.
// `context` (a std::string expression) is only built on failure.
#define CUDA_RETURN_IF_ERROR(call, context)                                                  \
  do {                                                                                       \
    cudaError_t strata_cuda_error_ = (call);                                                 \
    if (strata_cuda_error_ != cudaSuccess) {                                                 \
      return ::strata::CudaStatus(strata_cuda_error_, #call, __FILE__, __LINE__, (context)); \
    }                                                                                        \
  } while (0)

// The Status of one CUDA call (OK on success), for errors that are recorded, not returned.
#define CUDA_STATUS(call, context)                                                         \
  [&]() -> ::absl::Status {                                                                \
    cudaError_t strata_cuda_error_ = (call);                                               \
    if (strata_cuda_error_ == cudaSuccess) return ::absl::OkStatus();                      \
    return ::strata::CudaStatus(strata_cuda_error_, #call, __FILE__, __LINE__, (context)); \
  }()
