// Usable host memory; see host_memory.h.
#include "device/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "device/memory.h"

namespace strata {
namespace {

// The cgroup v2 memory.max of this process's cgroup (or v1's memory.limit_in_bytes); 0 when
// unlimited or unknown.
uint64_t CgroupLimit() {
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  std::string v2_path;
  std::string v1_path;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
    const size_t memory = line.find(":memory:");
    if (memory != std::string::npos) v1_path = line.substr(memory + 8);
  }
  auto read_number = [](const std::string& path) -> uint64_t {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") return 0;
    try {
      const unsigned long long value = std::stoull(text);
      return value >= (1ull << 60) ? 0 : value;  // v1 writes a huge number for "none"
    } catch (...) {
      return 0;
    }
  };
  if (!v2_path.empty()) {
    if (uint64_t limit = read_number("/sys/fs/cgroup" + v2_path + "/memory.max")) return limit;
  }
  if (!v1_path.empty()) {
    return read_number("/sys/fs/cgroup/memory" + v1_path + "/memory.limit_in_bytes");
  }
  return 0;
}

}  // namespace

std::string HostMemory::Describe() const {
  std::ostringstream out;
  out << FormatBytes(usable_bytes) << " usable (physical " << FormatBytes(physical_bytes)
      << ", cgroup limit "
      << (cgroup_limit_bytes == 0 ? std::string("none") : FormatBytes(cgroup_limit_bytes))
      << ", reserve " << FormatBytes(reserve_bytes) << ")";
  return out.str();
}

HostMemory HostMemoryFrom(uint64_t physical_bytes, uint64_t cgroup_limit_bytes) {
  HostMemory memory;
  memory.physical_bytes = physical_bytes;
  memory.cgroup_limit_bytes = cgroup_limit_bytes;
  uint64_t total = physical_bytes;
  if (cgroup_limit_bytes > 0) total = std::min(total, cgroup_limit_bytes);
  memory.reserve_bytes = std::min(total / 2, std::max<uint64_t>(2ull << 30, total / 8));
  memory.usable_bytes = total - memory.reserve_bytes;
  return memory;
}

HostMemory ProbeHostMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  const uint64_t physical =
      pages > 0 && page_bytes > 0 ? static_cast<uint64_t>(pages) * page_bytes : (64ull << 30);
  return HostMemoryFrom(physical, CgroupLimit());
}

}  // namespace strata
