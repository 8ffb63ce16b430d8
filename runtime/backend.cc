// Backend factory; see backend.h.
#include "runtime/backend.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/tier_checked_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "device/cpu_device.h"
#include "device/cuda/cuda_device.h"

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
  ASSIGN_OR_RETURN(const TierCapacities capacities,
                   ResolveTierCapacities(options, local_size, ProbeHostMemory()));
  CudaDeviceOptions device_options;
  device_options.local_rank = std::max(0, local_rank);
  device_options.device_memory_bytes = capacities.device_bytes;
  device_options.host_memory_bytes = capacities.host_bytes;
  StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(device_options);
  if (!device.ok()) {
    return CudaUnavailable(device.status(),
                           absl::StrCat("creating the device of local rank ", local_rank));
  }
  Backend backend;
  backend.device = std::move(*device);
  StatusOr<std::unique_ptr<Ops>> ops =
      CreateCudaOps(options.train.dtype, options.device.cuda_attention == CudaAttentionKind::kFlash
                                             ? CudaAttention::kFlash
                                             : CudaAttention::kGemm);
  if (!ops.ok()) return CudaUnavailable(ops.status(), "creating the CUDA kernels");
  backend.ops = std::move(*ops);
  ASSIGN_OR_RETURN(backend.host_ops, CreateCpuOps(options.train.dtype, options.device.threads));
  return backend;
}

}  // namespace

StatusOr<TierCapacities> ResolveTierCapacities(const Options& options, int ranks_on_node,
                                               const HostMemory& memory) {
  const int ranks = std::max(1, ranks_on_node);
  const uint64_t share = memory.usable_bytes / ranks;
  const bool cpu = options.device.backend == BackendKind::kCpu;
  const uint64_t explicit_device = options.device.memory_limit;
  const uint64_t explicit_host = options.tiers.host_memory_limit;
  TierCapacities capacities;
  const std::string machine = absl::StrCat("this machine's memory allows ",
                                           FormatBytes(share), " per rank for ", ranks,
                                           " rank(s) on it: ", memory.Describe());
  if (cpu) {
    // Both tiers are RAM here: together they must fit the rank's share.
    capacities.device_bytes =
        explicit_device > 0 ? explicit_device : std::min<uint64_t>(8ull << 30, share / 2);
    if (explicit_host > 0) {
      capacities.host_bytes = explicit_host;
    } else {
      capacities.host_bytes = share > capacities.device_bytes ? share - capacities.device_bytes : 0;
    }
    if (capacities.device_bytes + capacities.host_bytes > share || capacities.host_bytes == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "device.backend=cpu: the device tier (device.memory_limit = ",
          FormatBytes(capacities.device_bytes), explicit_device > 0 ? "" : ", its default",
          ") and the host tier (tiers.host_memory_limit = ", FormatBytes(capacities.host_bytes),
          explicit_host > 0 ? "" : ", its default",
          ") both live in RAM and together exceed what ", machine,
          "; lower them, or run fewer ranks on this machine"));
    }
    return capacities;
  }
  // CUDA: the device tier is the GPU's (clipped to its free memory when created; 0 = all).
  capacities.device_bytes = explicit_device > 0 ? explicit_device : ~0ull >> 1;
  capacities.host_bytes = explicit_host > 0 ? explicit_host : share;
  if (capacities.host_bytes > share) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tiers.host_memory_limit = ", FormatBytes(capacities.host_bytes), " is more than ",
        machine, "; lower it, or run fewer ranks on this machine"));
  }
  return capacities;
}

StatusOr<Backend> CreateBackend(const Options& options, int local_rank, int local_size) {
  // More kernel threads than 4x the cores only costs memory (a stack each) and switches.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (options.device.threads > 4 * cores) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device.threads = ", options.device.threads, " is more than 4x this machine's ", cores,
        " cores; use 0 (all cores) or at most ", 4 * cores));
  }
  if (options.device.backend == BackendKind::kCpu) {
    ASSIGN_OR_RETURN(const TierCapacities capacities,
                     ResolveTierCapacities(options, local_size, ProbeHostMemory()));
    CpuDeviceOptions device_options;
    device_options.device_memory_bytes = capacities.device_bytes;
    device_options.host_memory_bytes = capacities.host_bytes;
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
