// CUDA errors to Status; see cuda_status.h.
#include "device/cuda/cuda_status.h"

namespace strata {
namespace {

absl::StatusCode CodeFor(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidMemcpyDirection:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::StatusCode::kUnavailable;
    case cudaErrorNotReady:
      return absl::StatusCode::kUnavailable;
    case cudaErrorNotSupported:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

Status CudaStatus(cudaError_t error, const char* call, const char* file, int line,
                  const std::string& context) {
  if (error == cudaSuccess) return absl::OkStatus();
  // The error is reported now: clear the thread's last-error state so that a later
  // cudaGetLastError (after a kernel launch) does not report it again. Sticky errors
  // (a faulted context) stay, as they must.
  cudaGetLastError();
  return Status(CodeFor(error),
                absl::StrCat(context, context.empty() ? "" : ": ", call,
                             " failed: ", cudaGetErrorString(error), " (", cudaGetErrorName(error),
                             " = ", static_cast<int>(error), ") at ", file, ":", line));
}

}  // namespace strata
