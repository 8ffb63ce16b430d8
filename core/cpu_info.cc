// See cpu_info.h.
#include "core/cpu_info.h"

#include <unistd.h>

#include <fstream>

namespace strata {

std::string CpuInfoField(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key == field) return colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return "";
}

std::string DescribeCpu() {
  std::string name = CpuInfoField("model name");
  if (name.empty()) name = "unknown CPU";
  const std::string family = CpuInfoField("cpu family"), model = CpuInfoField("model");
  if (!family.empty()) name += " (family " + family + " model " + model + ")";
  return name + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " CPUs";
}

}  // namespace strata
