// Backend factory; see backend.h.
#include "runtime/backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/cpu_ops.h"
#include "runtime/core/cpu_device.h"

namespace strata {

uint64_t HostTierCapacity(const Options& options) {
  if (options.tiers.host_memory_limit > 0) return options.tiers.host_memory_limit;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  const uint64_t physical =
      pages > 0 && page_bytes > 0 ? static_cast<uint64_t>(pages) * page_bytes : (64ull << 30);
  int sharers = options.zero.world;
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    sharers = std::max(1, std::atoi(local));
  }
  return physical / std::max(1, sharers);
}

StatusOr<Backend> CreateBackend(const Options& options) {
  if (options.device.backend == "cpu") {
    CpuDeviceOptions device_options;
    device_options.device_memory_bytes = options.device.memory_limit;
    device_options.host_memory_bytes = HostTierCapacity(options);
    Backend backend;
    backend.device = CreateCpuDevice(device_options);
    ASSIGN_OR_RETURN(backend.ops, CreateCpuOps(options.train.dtype, options.device.threads));
    ASSIGN_OR_RETURN(backend.host_ops, CreateCpuOps(options.train.dtype, options.device.threads));
    return backend;
  }
  return absl::UnimplementedError(absl::StrCat("device.backend '", options.device.backend,
                                               "' is not available in this build (use cpu)"));
}

}  // namespace strata
