// The CPU backend's Device: it behaves like a small GPU so that every code path of the
// runtime runs and is tested without one. "Device memory" is host memory counted against
// a capped pool (device.memory_limit); a Stream is an in-order worker thread; an Event is
// a counter that a stream bumps when it reaches the record. Kernels enqueued on a stream
// run on its worker thread (and may use OpenMP inside).
// Thread-safety: as Device. Streams drain their queue before destruction.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device.h"

namespace strata {

struct CpuDeviceOptions {
  uint64_t device_memory_bytes = 8ull << 30;  // device.memory_limit
  uint64_t host_memory_bytes = ~0ull >> 1;    // host tier capacity (tiers.host_memory_limit)
};

std::unique_ptr<Device> CreateCpuDevice(const CpuDeviceOptions& options);

}  // namespace strata
