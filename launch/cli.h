// What the `strata` command line is made of: each command adds its subcommand and flags to
// the app (launch/commands.h) and says what runs when it is the one parsed; the flag sets
// several commands share are defined here once. The commands only parse flags and call the
// package that does the work (session/, sample/, interop/, plan/, report/, bench/, data/).
// Thread-safety: used from main only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_args.h"
#include "core/status.h"

namespace strata {

// A subcommand and what it runs when parsed. The flags' values live in the closure.
struct Command {
  CLI::App* app = nullptr;
  std::function<Status()> run;
};
using Commands = std::vector<Command>;

// --config FILE.json and repeatable --set section.key=value: the job, as `strata train`
// takes it. `set_help` says what the overrides are for in this command.
void AddJobFlags(CLI::App* app, std::string* config_path, std::vector<std::string>* sets,
                 const std::string& set_help = "override one key: section.key=value "
                                                "(repeatable)");

// The job flags and --steps (1..1000, default `args->steps` as set before the call).
void AddBenchFlags(CLI::App* app, BenchArgs* args, const std::string& steps_help);

// The usage error CLI11 raised, naming a mistyped command word with the closest one
// ("'strata trian': unknown command (did you mean 'train'?); expected one of ...").
std::string UsageProblem(CLI::App& app, int argc, char** argv, const CLI::ParseError& error);

}  // namespace strata
