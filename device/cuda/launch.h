// The one way strata launches a CUDA kernel, and the kernels' dynamic shared memory. With
// nvcc, Launch is the triple-chevron launch; under --config=simgpu (g++, STRATA_SIMGPU) it
// hands the kernel to simgpu's SIMT executor on the CUDA runtime double's stream
// (docs/simgpu.md), which checks the launch as an H200 would and reports errors through
// cudaGetLastError. No `<<<` appears anywhere else (//tools:check_launches_test).
// Only included by .cu files. Thread-safety: as the CUDA runtime.
#pragma once

#if defined(STRATA_SIMGPU)
#include "simgpu/simt.h"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace strata::cuda {

// Launches kKernel (a __global__ function, given as a template argument so that simgpu can
// name it in errors) on `grid` x `block` threads with `shared_bytes` of dynamic shared
// memory on `stream`. Errors are the runtime's: read them with cudaGetLastError.
template <auto kKernel, typename... Args>
inline void Launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
#if defined(STRATA_SIMGPU)
  ::simgpu::Launch(::simgpu::KernelName<kKernel>(), kKernel, grid, block, shared_bytes, stream,
                   std::forward<Args>(args)...);
#else
  kKernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
}

// The block's dynamic shared memory (the launch's shared_bytes), as T. One untyped array
// for every kernel, so kernels of different element types do not redeclare it.
template <typename T>
__device__ __forceinline__ T* DynamicShared() {
#if defined(STRATA_SIMGPU)
  return static_cast<T*>(::simgpu::DynamicSharedMemory());
#else
  extern __shared__ __align__(16) unsigned char strata_dynamic_shared[];
  return reinterpret_cast<T*>(strata_dynamic_shared);
#endif
}

}  // namespace strata::cuda
