// `strata checkpoint consolidate --from CHECKPOINT [--from DIR ...] --to DIR`: the rank files
// of a checkpoint (from several nodes' directories) gathered into one directory, as a run of
// one rank writes it; checkpoint/checkpoint_consolidate.h does it.
#include <cstdio>
#include <memory>
#include <string>

#include "checkpoint/checkpoint_consolidate.h"
#include "launch/commands.h"

namespace strata {

void AddCheckpointCommand(CLI::App& app, Commands* commands) {
  auto request = std::make_shared<ConsolidateRequest>();
  CLI::App* checkpoint = app.add_subcommand("checkpoint", "work on checkpoints");
  checkpoint->require_subcommand(1);
  CLI::App* consolidate = checkpoint->add_subcommand(
      "consolidate",
      "a checkpoint's rank files (from node-local directories) gathered into one directory");
  consolidate
      ->add_option("--from", request->from,
                   "the checkpoint (step-<k> directory, or a checkpoint_dir: its newest), then "
                   "more directories holding rank files it lacks (other nodes' copies); "
                   "repeatable")
      ->required();
  consolidate->add_option("--to", request->to, "a new (or empty) directory to write")->required();
  commands->push_back({consolidate, [request]() -> Status {
                         request->show_progress = true;  // core/progress.h: quiet under 2 s
                         ASSIGN_OR_RETURN(const std::string done, ConsolidateCheckpoint(*request));
                         std::printf("%s\n", done.c_str());
                         return absl::OkStatus();
                       }});
}

}  // namespace strata
