// Backend selection: the Device and the Ops (kernels) for `device.backend`, made together
// so that the kernels match the device's memory.
// - "cpu": the CPU device (a capped host pool plays the device tier) and the CPU kernels,
//   each set refusing buffers of the other tier (kernels/tier_checked_ops.h).
// - "cuda": the CUDA device on GPU (local rank % visible GPUs) with device.memory_limit and
//   a pinned host tier of ResolveTierCapacities; the CUDA kernels on it; CPU kernels as
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
#include "device/device.h"
#include "device/host_memory.h"
#include "core/options.h"

namespace strata {

struct Backend {
  std::unique_ptr<Device> device;  // first: destroyed last
  std::unique_ptr<Ops> ops;        // kernels on the device tier
  std::unique_ptr<Ops> host_ops;   // CPU kernels on the host tier (the offloaded optimizer)
};

// The tiers' capacities of one of the `ranks_on_node` ranks sharing a machine (threads of
// this process, or processes on this node: Communicator::local_size), from `memory`'s
// usable bytes divided among them (the rank's share):
// - cpu: both tiers are RAM. device.memory_limit, or by default min(8 GiB, share / 2);
//   tiers.host_memory_limit, or by default the rest of the share. Together above the share
//   is kResourceExhausted naming both keys and the machine's memory.
// - cuda: device.memory_limit, or by default all of the GPU (clipped to its free memory
//   when the device is created); tiers.host_memory_limit (pinned), or by default the
//   share; an explicit one above the share is kResourceExhausted.
struct TierCapacities {
  uint64_t device_bytes = 0;
  uint64_t host_bytes = 0;
};
StatusOr<TierCapacities> ResolveTierCapacities(const Options& options, int ranks_on_node,
                                               const HostMemory& memory);

// The backend of the rank that is `local_rank` of the `local_size` ranks sharing this node
// (Communicator::local_rank/local_size): the rank picks the GPU on device.backend=cuda
// (local_rank modulo the visible GPUs); the node's ranks share its memory.
StatusOr<Backend> CreateBackend(const Options& options, int local_rank, int local_size);

// As above for local rank 0 of zero.world ranks as threads (tests, one process).
StatusOr<Backend> CreateBackend(const Options& options);

}  // namespace strata
