// The fixed rank-order sum kernel; see nccl_reduce.h. A grid-stride loop over elements, the
// rank loop innermost, so each element's additions happen in one thread in rank order.
#include <algorithm>
#include <cstdint>

#include "collectives/nccl_reduce.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/launch.h"

namespace strata {
namespace {

__device__ __forceinline__ float LoadElement(const float* p) { return *p; }
__device__ __forceinline__ float LoadElement(const uint16_t* p) {
  return __uint_as_float(static_cast<uint32_t>(*p) << 16);
}
__device__ __forceinline__ void StoreElement(float* p, float value) { *p = value; }
// dtype.h's ToBf16, bit for bit: NaN keeps its payload and becomes quiet; otherwise round
// to nearest even.
__device__ __forceinline__ void StoreElement(uint16_t* p, float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    *p = static_cast<uint16_t>((bits >> 16) | 0x40);
    return;
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  *p = static_cast<uint16_t>((bits + rounding) >> 16);
}

template <typename T>
__global__ void SumSlotsKernel(const T* slots, size_t stride, int num_slots, T* output,
                               size_t count) {
  const size_t grid_stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += grid_stride) {
    float acc = LoadElement(slots + i);
    for (int s = 1; s < num_slots; ++s) acc = __fadd_rn(acc, LoadElement(slots + s * stride + i));
    StoreElement(output + i, acc);
  }
}

}  // namespace

Status SumSlotsInRankOrderAsync(const void* slots, size_t stride_elements, int num_slots,
                                void* output, size_t count, DType dtype, cudaStream_t stream) {
  if (count == 0 || num_slots <= 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, 8192);
  if (dtype == DType::kF32) {
    ::strata::cuda::Launch<&SumSlotsKernel<float>>(
        static_cast<unsigned>(blocks), kThreads, 0, stream, static_cast<const float*>(slots),
        stride_elements, num_slots, static_cast<float*>(output), count);
  } else {
    ::strata::cuda::Launch<&SumSlotsKernel<uint16_t>>(
        static_cast<unsigned>(blocks), kThreads, 0, stream, static_cast<const uint16_t*>(slots),
        stride_elements, num_slots, static_cast<uint16_t*>(output), count);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                       absl::StrCat("launching the rank-order sum of ", num_slots, " x ", count,
                                    " ", DTypeName(dtype), " elements"));
  return absl::OkStatus();
}

}  // namespace strata
