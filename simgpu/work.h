// simgpu/work.h: how operations enter the simulated GPU's streams, the seam between the three
// parts of simgpu (docs/simgpu.md): the CUDA runtime double (cudart.cc) implements it; the
// kernel launcher (simt.h) and the NCCL double (nccl.cc, a shared library that reaches it
// through simgpu_api(), below) use it. Nothing outside simgpu/ includes this header.
//
// An operation is a closure run on the stream's own thread in stream order (ordering mode,
// the default) or at once on the enqueuing thread (blocking mode, STRATA_SIMGPU_MODE=blocking).
// In ordering mode every operation's memory accesses are checked, when it is enqueued,
// against the happens-before order of streams and events (vector clocks), so an unordered
// read/write pair is reported naming both operations whatever the timing.
// Thread-safety: every function is thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace simgpu {

// One memory range an operation touches. A kernel's pointer argument is known only by its
// start: the launcher records the element it points at, [ptr, ptr + sizeof(*ptr)), which
// every other operation on the same array also touches (its first element), and never a
// neighbour packed beside it (strata's per-unit norm parts, written by two streams).
// bytes == 0 means [ptr, the next 4 KiB boundary).
struct Access {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool write = false;
};

// The work of an operation: returns "" on success, else a message naming what went wrong
// (printed to stderr with the operation's name; the device then has the sticky `failure`).
using Work = std::function<std::string()>;

// Queues `work` on `stream` (nullptr: the legacy default stream) as one operation called
// `what` ("kernel AdamWKernel<float>", "ncclAllReduce", "cudaMemcpyAsync"). Returns the
// device's sticky error if it has one, cudaErrorInvalidResourceHandle for an unknown or
// destroyed stream (the work does not run then), else cudaSuccess. An access that races
// with an earlier operation makes the device's error sticky (cudaErrorLaunchFailure) and
// prints both operations; the work still runs.
cudaError_t Enqueue(cudaStream_t stream, std::string what, std::vector<Access> accesses,
                    Work work, cudaError_t failure = cudaErrorLaunchFailure);

// Records a non-sticky launch error as the runtime does: cudaGetLastError returns it once
// and clears it; cudaPeekAtLastError returns it without clearing.
void SetLaunchError(cudaError_t error);

// The device allocation (cudaMalloc, cudaMallocAsync) holding ptr; {nullptr, 0} if none.
struct Range {
  void* base = nullptr;
  size_t bytes = 0;
};
Range FindDeviceAllocation(const void* ptr);

// The dynamic shared memory limit set for `kernel` with cudaFuncSetAttribute
// (cudaFuncAttributeMaxDynamicSharedMemorySize); 48 KiB where none was set.
int MaxDynamicSharedBytes(const void* kernel);

// The seed of the blocks' random order: STRATA_SIMGPU_SEED, else 1.
uint64_t Seed();

// For shared libraries loaded with dlopen (the NCCL double): the same functions through
// one C symbol, found with dlsym(RTLD_DEFAULT, "simgpu_api"). `version` changes whenever
// the table does.
struct Api {
  int version;
  cudaError_t (*enqueue)(cudaStream_t stream, std::string what, std::vector<Access> accesses,
                         Work work, cudaError_t failure);
  Range (*find_device_allocation)(const void* ptr);
  // The device current on the calling thread (cudaGetDevice) and the device count.
  int (*current_device)();
  int (*device_count)();
};
constexpr int kApiVersion = 1;

}  // namespace simgpu

extern "C" const simgpu::Api* simgpu_api();
