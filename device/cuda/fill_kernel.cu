// The fill kernel; see fill_kernel.h. A grid-stride loop, so any count fits one launch of
// a fixed grid.
#include <algorithm>

#include "device/cuda/cuda_status.h"
#include "device/cuda/fill_kernel.h"
#include "device/cuda/launch.h"

namespace strata {
namespace {

__global__ void FillKernel(float* dst, float value, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = value;
  }
}

}  // namespace

Status FillAsync(float* dst, float value, size_t count, cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, 4096);
  ::strata::cuda::Launch<&FillKernel>(static_cast<unsigned>(blocks), kThreads, 0, stream, dst,
                                      value, count);
  CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                       absl::StrCat("launching FillKernel over ", count, " floats"));
  return absl::OkStatus();
}

}  // namespace strata
