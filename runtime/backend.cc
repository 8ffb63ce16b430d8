// Backend factory; see backend.h.
#include "runtime/backend.h"

#include "kernels/cpu/cpu_ops.h"
#include "runtime/core/cpu_device.h"

namespace strata {

StatusOr<Backend> CreateBackend(const Options& options) {
  if (options.device.backend == "cpu") {
    CpuDeviceOptions device_options;
    device_options.device_memory_bytes = options.device.memory_limit;
    Backend backend;
    backend.device = CreateCpuDevice(device_options);
    ASSIGN_OR_RETURN(backend.ops, CreateCpuOps(options.train.dtype, options.device.threads));
    return backend;
  }
  return absl::UnimplementedError(absl::StrCat("device.backend '", options.device.backend,
                                               "' is not available in this build (use cpu)"));
}

}  // namespace strata
