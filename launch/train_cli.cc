// `strata train [--config F] [--set K=V]... [--metrics F] [--trace F] [--help-config]`:
// session/train_run.h runs it.
#include <cstdio>
#include <memory>

#include "config/options_parse.h"
#include "launch/commands.h"
#include "session/faults.h"
#include "session/train_run.h"

namespace strata {

void AddTrainCommand(CLI::App& app, Commands* commands) {
  auto args = std::make_shared<TrainArgs>();
  auto help_config = std::make_shared<bool>(false);
  CLI::App* train = app.add_subcommand(
      "train", "train a model (built-in, or model.from a Hugging Face or llm.c file)");
  AddJobFlags(train, &args->config_path, &args->sets);
  train->add_option("--metrics", args->metrics_path, "write one JSON object per step here");
  train->add_option("--trace", args->trace_path,
                    "write a timeline trace (Chrome trace JSON: Perfetto, chrome://tracing) of "
                    "the steps train.trace_steps names (default 2:3); under several ranks one "
                    "file per rank, FILE.rank<k>.json");
  train->add_flag("--help-config", *help_config, "list every config key with its default");
  commands->push_back({train, [args, help_config]() -> Status {
                         if (*help_config) {
                           std::printf("%s", DescribeKeys().c_str());
                           return absl::OkStatus();
                         }
                         ASSIGN_OR_RETURN(args->faults, FaultsFromEnvironment());
                         return RunTrain(*args);
                       }});
}

}  // namespace strata
