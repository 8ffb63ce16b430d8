// The GPU a CUDA call is for: see cuda_gpu.h.
#include "device/cuda/cuda_gpu.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "device/cuda/cuda_status.h"

namespace strata {
namespace cuda_internal {

std::string Gpu(int device_id) { return absl::StrCat("GPU ", device_id); }

Status Activate(int device_id) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id), absl::StrCat("selecting ", Gpu(device_id)));
  return absl::OkStatus();
}

void LogIfError(const Status& status) {
  if (!status.ok()) spdlog::error("{}", status.ToString());
}

}  // namespace cuda_internal
}  // namespace strata
