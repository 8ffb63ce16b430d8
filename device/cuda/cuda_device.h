// The CUDA backend's Device (device/device.h) on one GPU of this node.
// - Device tier: cudaMalloc'd buffers, accounted in a MemoryPool whose capacity is
//   device.memory_limit clipped to the GPU's free memory when the device is created.
//   Buffers are 4 KiB-aligned. No managed memory.
// - Host tier: pinned buffers, accounted against tiers.host_memory_limit: below 2 MiB from
//   cudaHostAlloc, from 2 MiB on transparent huge pages registered with cudaHostRegister.
// - Both tiers go through a BlockCache (device/block_cache.h): freed blocks are reused by size
//   class once every stream has passed their free, so a steady-state step makes no
//   cudaMalloc/cudaFree (driver_calls() counts them).
// - Stream: a non-blocking cudaStream_t. EnqueueHost runs its function on the stream's own
//   worker thread, in order with the stream's copies and kernels (host_work.h: an event
//   before it, a stream memory wait after it), so host work may call CUDA and never waits
//   for another stream's host work; where the GPU cannot wait on host memory it falls back
//   to cudaLaunchHostFunc (one driver thread for all streams; no CUDA calls), saying so.
//   The first non-OK Status (or CUDA error seen at Synchronize) is sticky and Synchronize
//   returns it. Host work after an error is skipped; device work (copies, kernels) cannot
//   be skipped and still runs.
// - Event: a cudaEvent_t without timing; Record/Wait are cudaEventRecord/cudaStreamWaitEvent.
// - CopyAsync is cudaMemcpyAsync(cudaMemcpyDefault) between any two tiers; MemsetAsync is
//   cudaMemsetAsync on device memory and an in-order host function on host memory.
// Every CUDA call is checked where it is made; errors name the call, file:line, GPU and
// bytes (cuda_status.h).
// Thread-safety: as Device. Every method sets this device current on the calling thread
// first, so any host thread may use it. Buffers, streams and events must not outlive the
// Device; a stream drains its work before it is destroyed.
//
// This header builds everywhere; where strata is built without CUDA (no toolkit, or
// --config=nocuda) CreateCudaDevice and CudaDeviceCount return kUnavailable.
#pragma once

#include <cstdint>
#include <memory>

#include "device/device.h"
#include "core/status.h"

namespace strata {

struct CudaDeviceOptions {
  // This rank's place among the ranks on this node (Communicator::local_rank). The GPU
  // used is local_rank % (number of visible GPUs), so ranks spread over the GPUs and
  // several ranks may share one when there are more ranks than GPUs.
  int local_rank = 0;
  // device.memory_limit: device-tier capacity. Clipped to the GPU's free memory at
  // creation (Describe() says when), so a pool never promises memory the card lacks.
  uint64_t device_memory_bytes = 8ull << 30;
  // tiers.host_memory_limit: pinned host-tier capacity.
  uint64_t host_memory_bytes = ~0ull >> 1;
};

// Selects the GPU, checks it and creates the device. Fails (kUnavailable) when no GPU is
// usable, with CUDA's reason (e.g. "CUDA driver version is insufficient for CUDA runtime
// version"), and (kInvalidArgument) for a negative local_rank.
StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const CudaDeviceOptions& options);

// The number of GPUs CUDA can use, or why none: the error of cudaGetDeviceCount, or
// kUnavailable where strata was built without CUDA. Tests probe this to skip.
StatusOr<int> CudaDeviceCount();

// True where strata was compiled with CUDA (the toolkit was found at build time).
bool BuiltWithCuda();

}  // namespace strata
