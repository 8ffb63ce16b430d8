// What this machine's RAM allows a run to use: the physical memory, lowered to the
// process's cgroup limit (containers, Slurm jobs) where one is set, minus a reserve for the
// OS, the page cache and the process itself (max(2 GiB, 1/8)). The default host-tier
// capacity and the CPU backend's default device-tier capacity come from it, and explicit
// limits above it are refused, so no setting can promise memory the kernel would answer
// with its OOM killer instead of strata's own "tier is full" error.
// Thread-safety: pure functions of /proc and /sys.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

struct HostMemory {
  uint64_t physical_bytes = 0;
  uint64_t cgroup_limit_bytes = 0;  // 0: none
  uint64_t reserve_bytes = 0;
  uint64_t usable_bytes = 0;  // min(physical, cgroup limit) - reserve

  // "21.0 GiB usable (physical 24.0 GiB, cgroup limit none, reserve 3.0 GiB)"
  std::string Describe() const;
};

HostMemory ProbeHostMemory();

// The arithmetic of ProbeHostMemory, for tests.
HostMemory HostMemoryFrom(uint64_t physical_bytes, uint64_t cgroup_limit_bytes);

}  // namespace strata
