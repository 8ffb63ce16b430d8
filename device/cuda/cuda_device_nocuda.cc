// CreateCudaDevice where strata is built without CUDA (no toolkit, or --config=nocuda):
// every entry point says so, so a configuration that asks for the CUDA backend fails with
// a clear message instead of a link error. See cuda_device.h.
#include "device/cuda/cuda_device.h"

namespace strata {
namespace {

Status NotBuilt() {
  return absl::UnavailableError(
      "strata was built without CUDA (no CUDA toolkit at build time, or --config=nocuda); "
      "rebuild on a machine with the toolkit to use device.backend=cuda");
}

}  // namespace

StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const CudaDeviceOptions&) { return NotBuilt(); }

StatusOr<int> CudaDeviceCount() { return NotBuilt(); }

bool BuiltWithCuda() { return false; }

}  // namespace strata
