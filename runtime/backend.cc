// Backend factory; see backend.h.
#include "runtime/backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/tier_checked_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "core/cpu_device.h"
#include "core/cuda/cuda_device.h"

namespace strata {
namespace {

// "device.backend=cuda: <what>: <CUDA's reason>", keeping the code of `status`.
Status CudaUnavailable(const Status& status, const std::string& what) {
  return Status(status.code(),
                absl::StrCat("device.backend=cuda: ", what, ": ", status.message(),
                             " (device.backend=cpu runs without a GPU)"));
}

StatusOr<Backend> CreateCudaBackend(const Options& options, int local_rank, int local_size) {
  if (!BuiltWithCuda()) {
    return absl::FailedPreconditionError(
        "device.backend=cuda: this strata was built without CUDA (no CUDA toolkit found at "
        "build time, or --config=nocuda); rebuild where nvcc is installed, or use "
        "device.backend=cpu");
  }
  // Probe first: the count's error is CUDA's own reason (no driver, no device) and costs
  // nothing, before any pool or kernel is set up.
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return CudaUnavailable(count.status(), "no usable GPU");
  if (*count <= 0) {
    return absl::UnavailableError(
        "device.backend=cuda: no usable GPU: CUDA sees 0 devices (check CUDA_VISIBLE_DEVICES "
        "and nvidia-smi), or use device.backend=cpu");
  }
  CudaDeviceOptions device_options;
  device_options.local_rank = std::max(0, local_rank);
  device_options.device_memory_bytes = options.device.memory_limit;
  device_options.host_memory_bytes = HostTierCapacity(options, local_size);
  StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(device_options);
  if (!device.ok()) {
    return CudaUnavailable(device.status(),
                           absl::StrCat("creating the device of local rank ", local_rank));
  }
  Backend backend;
  backend.device = std::move(*device);
  StatusOr<std::unique_ptr<Ops>> ops = CreateCudaOps(options.train.dtype);
  if (!ops.ok()) return CudaUnavailable(ops.status(), "creating the CUDA kernels");
  backend.ops = std::move(*ops);
  ASSIGN_OR_RETURN(backend.host_ops, CreateCpuOps(options.train.dtype, options.device.threads));
  return backend;
}

}  // namespace

uint64_t HostTierCapacity(const Options& options, int ranks_on_node) {
  if (options.tiers.host_memory_limit > 0) return options.tiers.host_memory_limit;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  const uint64_t physical =
      pages > 0 && page_bytes > 0 ? static_cast<uint64_t>(pages) * page_bytes : (64ull << 30);
  return physical / std::max(1, ranks_on_node);
}

StatusOr<Backend> CreateBackend(const Options& options, int local_rank, int local_size) {
  if (options.device.backend == BackendKind::kCpu) {
    CpuDeviceOptions device_options;
    device_options.device_memory_bytes = options.device.memory_limit;
    device_options.host_memory_bytes = HostTierCapacity(options, local_size);
    Backend backend;
    backend.device = CreateCpuDevice(device_options);
    ASSIGN_OR_RETURN(std::unique_ptr<Ops> ops,
                     CreateCpuOps(options.train.dtype, options.device.threads));
    ASSIGN_OR_RETURN(std::unique_ptr<Ops> host_ops,
                     CreateCpuOps(options.train.dtype, options.device.threads));
    // Both tiers share one address space here: each kernel set refuses the other tier's
    // buffers, so a mix-up that would crash a GPU fails on the CPU too.
    backend.ops = WithTierChecks(std::move(ops), *backend.device, Tier::kDevice);
    backend.host_ops = WithTierChecks(std::move(host_ops), *backend.device, Tier::kHost);
    return backend;
  }
  return CreateCudaBackend(options, local_rank, local_size);
}

StatusOr<Backend> CreateBackend(const Options& options) {
  return CreateBackend(options, 0, options.zero.world);
}

}  // namespace strata
