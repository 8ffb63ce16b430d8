// Helpers shared by the CUDA kernels of kernels/cuda (one .cu per op): fp32/bf16 loads and
// stores (bf16 rounded to nearest even exactly as core/dtype.h's ToBf16, NaN kept NaN),
// warp and block reductions in a fixed order (so every reduction is deterministic: the same
// inputs and launch shape give the same bits), the grid-stride loop, launch-size helpers and
// the launch-error Status every launcher returns. Block sizes are each file's own choice.
// Only included by .cu files. Thread-safety: pure functions.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "device/cuda/cuda_status.h"
#include "core/dtype.h"
#include "core/status.h"
#include "device/cuda/launch.h"

namespace strata::cuda_kernels {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float DeviceLoad(const float* p) { return *p; }
__device__ __forceinline__ float DeviceLoad(const bf16* p) {
  return __uint_as_float(static_cast<uint32_t>(p->bits) << 16);
}
__device__ __forceinline__ void DeviceStore(float* p, float value) { *p = value; }
__device__ __forceinline__ void DeviceStore(bf16* p, float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
    p->bits = static_cast<uint16_t>((bits >> 16) | 0x40u);
    return;
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  p->bits = static_cast<uint16_t>((bits + rounding) >> 16);
}

// Butterfly reductions: every lane ends with the same value, computed in the same order.
__device__ __forceinline__ float WarpSum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}
__device__ __forceinline__ double WarpSum(double value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}
__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024); every thread gets
// the result. `scratch` holds 32 values of shared memory; the call starts and ends with
// a barrier, so it may be called repeatedly with the same scratch.
template <typename V>
__device__ __forceinline__ V BlockSum(V value, V* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = WarpSum(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  V total = lane < num_warps ? scratch[lane] : V(0);
  total = WarpSum(total);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float BlockMax(float value, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = WarpMax(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = lane < num_warps ? scratch[lane] : -INFINITY;
  total = WarpMax(total);
  __syncthreads();
  return total;
}

// for (size_t i = ...; i < n; ...) over the whole grid: each element is handled by one thread.
#define STRATA_GRID_STRIDE_LOOP(i, n)                                                  \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU, capped so
// that a launch never exceeds the grid limit.
inline unsigned GridStrideBlocks(size_t n, int threads) {
  constexpr size_t kMaxBlocks = 1 << 16;
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// The launch error of the kernel(s) just enqueued, naming them.
inline Status LaunchStatus(const char* what, size_t size) {
  CUDA_RETURN_IF_ERROR(cudaGetLastError(), absl::StrCat("launching ", what, " (size ", size, ")"));
  return absl::OkStatus();
}

// Runs fn(float{}) or fn(bf16{}) for the compute dtype: the tag's type is the storage type.
template <typename Fn>
auto DispatchStorage(DType dtype, Fn fn) {
  if (dtype == DType::kF32) return fn(float{});
  return fn(bf16{});
}

}  // namespace strata::cuda_kernels
