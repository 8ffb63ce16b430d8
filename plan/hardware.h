// The machine a plan is for (plan/plan.h prices a dry run's counts over it): measured by a
// probe (plan/plan_probe.h) or read from a hardware file written by one and edited for a
// machine one does not have.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "core/options.h"
#include "core/status.h"

namespace strata {

// The machine a plan is for. Rates in bytes or FLOP per second; 0 = unknown (a resource
// whose rate is unknown cannot be priced and says so).
struct Hardware {
  std::string source;  // "probe of <cpu>" or the file it came from
  BackendKind backend = BackendKind::kCpu;
  uint64_t device_memory_bytes = 0;  // per rank: a GPU's memory (cpu: device.memory_limit)
  double matmul_flops_fp32 = 0, matmul_flops_bf16 = 0;  // per rank
  double device_memory_bandwidth = 0;  // elementwise kernels
  uint64_t host_memory_bytes = 0;      // RAM of a node usable by training
  double host_to_device = 0, device_to_host = 0;  // per rank (PCIe; cpu: memcpy)
  double cpu_adam_params = 0;  // params per second of the CPU Adam on a node (its ranks share it)
  double cpu_adam8bit_params = 0;  // the same, 8-bit states (train.optimizer_states = int8)
  double disk_read = 0, disk_write = 0;  // O_DIRECT, zero.nvme_dir's disk, per node
  uint64_t disk_free_bytes = 0;
  double network = 0;  // bytes per second a rank sends (collectives across ranks)
  int nodes = 1;
  int ranks_per_node = 1;
  // Bytes per second one node sends to the others (its network link, shared by its ranks);
  // needed where nodes > 1. `network` is then the rate within a node.
  double inter_node_network = 0;
};
// A hardware file ({"format": "strata-hardware", "version": 1, ...} with the fields above
// by name); unknown fields, impossible values and other formats are errors naming them.
StatusOr<Hardware> ParseHardware(const std::string& json_text, const std::string& where);
std::string HardwareJson(const Hardware& hardware);

}  // namespace strata
