// `strata plan`: the decision order's configurations for a job and a machine (plan/plan.h),
// over figures probed on this machine (cached between plans, plan/plan_probe.h) or read
// from a hardware file; prints the table, and optionally writes the figures used and the
// recommended configuration.
// Thread-safety: called once, from main.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

struct PlanArgs {
  std::string config_path;         // --config FILE.json: the job
  std::vector<std::string> sets;   // --set
  std::string hardware = "probe";  // --hardware probe|FILE
  bool reprobe = false;            // --reprobe: measure again instead of the cached probe
  std::string save_hardware;       // --save-hardware FILE: the figures used, as a hardware file
  std::string emit_path;           // --emit FILE.json: the recommended configuration
  // A cluster of this machine's (or the file's) nodes: --nodes N --inter-node-bandwidth B/s
  // (ranks per node: zero.world / N). 0: as the hardware says.
  int nodes = 0;
  double inter_node_bandwidth = 0;
};

Status RunPlan(const PlanArgs& args);

}  // namespace strata
