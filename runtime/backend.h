// Backend selection: the Device and the Ops (kernels) for `device.backend`, made together
// so that the kernels match the device's memory. Only "cpu" exists in this build; "cuda"
// comes with the CUDA issue.
// Thread-safety: plain factory.
#pragma once

#include <memory>

#include "kernels/ops.h"
#include "runtime/core/device.h"
#include "runtime/core/options.h"

namespace strata {

struct Backend {
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;       // kernels on the device tier
  std::unique_ptr<Ops> host_ops;  // CPU kernels on the host tier (the offloaded optimizer)
};

// The host tier's capacity: tiers.host_memory_limit, or where that is 0 the machine's
// physical memory divided by the ranks sharing this process (zero.world threads) or this
// node (mpirun's local size).
uint64_t HostTierCapacity(const Options& options);

StatusOr<Backend> CreateBackend(const Options& options);

}  // namespace strata
