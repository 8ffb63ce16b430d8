// The CPU backend's Device: it behaves like a small GPU so that every code path of the
// runtime runs and is tested without one. "Device memory" is host memory counted against
// a capped pool (device.memory_limit); a Stream is an in-order worker thread; an Event is
// a counter that a stream bumps when it reaches the record. Kernels enqueued on a stream
// run on its worker thread (and may use OpenMP inside).
// Thread-safety: as Device. Streams drain their queue before destruction.
#pragma once

#include <cstdint>
#include <memory>

#include "device/device.h"

namespace strata {

struct CpuDeviceOptions {
  uint64_t device_memory_bytes = 8ull << 30;  // device.memory_limit
  uint64_t host_memory_bytes = ~0ull >> 1;    // host tier capacity (tiers.host_memory_limit)
  // A dry run (strata plan): every allocation is accounted in the pools as usual but is
  // untouched virtual memory (mapped without reserving swap, so a plan for a machine
  // larger than this one does not commit its memory); copies and memsets do nothing, the
  // copies counted by direction (Device::dry_copy_bytes). Kernels must be counting ones
  // (kernels/counting_ops.h).
  bool dry_run = false;
  // A dry run of a GPU's set-up (strata plan for a CUDA machine): the device tier is then
  // not host memory (Device::InHostMemory), as on the GPU. Ignored without dry_run.
  bool dry_run_of_gpu = false;
};

std::unique_ptr<Device> CreateCpuDevice(const CpuDeviceOptions& options);

}  // namespace strata
