// `strata plan [--config F] [--set K=V]... [--hardware probe|FILE] [...]`: plan/plan_run.h.
#include <memory>

#include "launch/commands.h"
#include "plan/plan_run.h"

namespace strata {

void AddPlanCommand(CLI::App& app, Commands* commands) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan", "what fits this machine (or another), how fast, and which configuration to use");
  AddJobFlags(plan, &args->config_path, &args->sets,
              "section.key=value overrides of the job (repeatable)");
  plan->add_option("--hardware", args->hardware,
                   "probe (measure this machine, cached) or a hardware FILE.json");
  plan->add_flag("--reprobe", args->reprobe, "measure again instead of the cached probe");
  plan->add_option("--save-hardware", args->save_hardware,
                   "write the figures used as a hardware file (edit it to plan for another "
                   "machine)");
  plan->add_option("--nodes", args->nodes,
                   "plan a cluster of N such nodes (zero.world / N ranks each)")
      ->check(CLI::Range(1, 65536));
  plan->add_option("--inter-node-bandwidth", args->inter_node_bandwidth,
                   "bytes per second one node sends to the others (with --nodes)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--emit", args->emit_path,
                   "write the recommended configuration as a config file strata train accepts");
  commands->push_back({plan, [args]() { return RunPlan(*args); }});
}

}  // namespace strata
