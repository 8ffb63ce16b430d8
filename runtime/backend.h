// Backend selection: the Device and the Ops (kernels) for `device.backend`, made together
// so that the kernels match the device's memory.
// - "cpu": the CPU device (a capped host pool plays the device tier) and the CPU kernels,
//   each set refusing buffers of the other tier (kernels/tier_checked_ops.h).
// - "cuda": the CUDA device on GPU (local rank % visible GPUs) with device.memory_limit and
//   a pinned host tier of HostTierCapacity(options); the CUDA kernels on it; CPU kernels as
//   host_ops for the offloaded optimizer (they run as host functions on CUDA streams).
//   Where strata was built without CUDA, or no GPU is usable, CreateBackend fails at once
//   (kUnavailable / kFailedPrecondition) naming device.backend=cuda and the reason.
// Invariant: members are destroyed in reverse order, so both Ops objects (the CUDA Ops
// hold cuBLAS handles bound to the device's streams) go before the Device. Keep `device`
// the first member.
// Thread-safety: plain factory.
#pragma once

#include <memory>

#include "kernels/ops.h"
#include "core/device.h"
#include "core/options.h"

namespace strata {

struct Backend {
  std::unique_ptr<Device> device;  // first: destroyed last
  std::unique_ptr<Ops> ops;        // kernels on the device tier
  std::unique_ptr<Ops> host_ops;   // CPU kernels on the host tier (the offloaded optimizer)
};

// The host tier's capacity: tiers.host_memory_limit, or where that is 0 the machine's
// physical memory divided by the ranks sharing this process (zero.world threads) or this
// node (mpirun's local size).
uint64_t HostTierCapacity(const Options& options);

// This process's rank on its node under mpirun (OMPI_COMM_WORLD_LOCAL_RANK), or -1 where
// that variable is absent (not under mpirun).
int LocalRankFromEnvironment();

// The backend for `local_rank`, the rank among those sharing this node: it picks the GPU
// on device.backend=cuda (ignored on cpu). Ranks as threads of one process pass their rank.
StatusOr<Backend> CreateBackend(const Options& options, int local_rank);

// As above with local_rank = LocalRankFromEnvironment(), or 0 where that is -1.
StatusOr<Backend> CreateBackend(const Options& options);

}  // namespace strata
