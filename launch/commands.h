// The `strata` subcommands, each in its own file: Add*Command adds the subcommand and its
// flags to `app` and appends what runs when it is parsed to `commands`.
// Thread-safety: called once from main, before parsing.
#pragma once

#include <CLI/CLI.hpp>

#include "launch/cli.h"

namespace strata {

void AddTrainCommand(CLI::App& app, Commands* commands);     // launch/train_cli.cc
void AddExportCommand(CLI::App& app, Commands* commands);    // launch/export_cli.cc
void AddTokenizeCommand(CLI::App& app, Commands* commands);  // launch/tokenize_cli.cc
void AddSampleCommand(CLI::App& app, Commands* commands);    // launch/sample_cli.cc
void AddPlanCommand(CLI::App& app, Commands* commands);      // launch/plan_cli.cc
void AddReportCommand(CLI::App& app, Commands* commands);    // launch/report_cli.cc
void AddBenchCommands(CLI::App& app, Commands* commands);    // launch/bench_cli.cc
void AddCheckpointCommand(CLI::App& app, Commands* commands);  // launch/checkpoint_cli.cc

}  // namespace strata
