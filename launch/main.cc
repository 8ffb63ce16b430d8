// The `strata` command line. Each command adds its own subcommand and flags
// (launch/commands.h); main parses (CLI11), runs the one parsed and turns its Status into
// the exit status: 0 done; 1 an error (one clear message); 2 a usage error (a mistyped
// command is named, with the closest one); 128 + N stopped by signal N
// (session/interrupt.h).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "core/exceptions.h"
#include "launch/commands.h"
#include "session/interrupt.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: ZeRO training runtime (stages, CPU offload, NVMe offload)"};
  app.require_subcommand(1);
  strata::Commands commands;
  strata::AddTrainCommand(app, &commands);
  strata::AddExportCommand(app, &commands);
  strata::AddTokenizeCommand(app, &commands);
  strata::AddSampleCommand(app, &commands);
  strata::AddPlanCommand(app, &commands);
  strata::AddReportCommand(app, &commands);
  strata::AddBenchCommands(app, &commands);
  strata::AddCheckpointCommand(app, &commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help and the like: CLI11 prints them
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "strata: usage error: %s\n%s",
                 strata::UsageProblem(app, argc, argv, e).c_str(),
                 "run 'strata --help' (or 'strata <command> --help') for the commands and "
                 "flags\n");
    return 2;
  }

  // Every command: a signal removes the files being written (core/remove_on_signal.h) and
  // says so; an exception that escapes becomes one error line (core/exceptions.h).
  strata::InstallInterruptHandlers();
  strata::Status status;
  for (const strata::Command& command : commands) {
    if (command.app->parsed()) {
      status = strata::StatusFromExceptions(command.run,
                                            "strata " + command.app->get_name());
    }
  }
  if (status.code() == absl::StatusCode::kCancelled && strata::StopSignal() != 0) {
    // The lead rank says where the run stopped; every other rank (each process under
    // mpirun) says that it stopped and with which status, so no exit is silent.
    const int signal_number = strata::StopSignal();
    const std::string summary = strata::InterruptSummary();
    if (!summary.empty()) {
      std::fprintf(stderr, "strata: %s\n", summary.c_str());
    } else {
      std::fprintf(stderr, "strata: stopped by %s with the other ranks (exit %d)\n",
                   strata::SignalName(signal_number).c_str(),
                   strata::ExitCodeForSignal(signal_number));
    }
    return strata::ExitCodeForSignal(signal_number);
  }
  if (!status.ok()) {
    if (!strata::ErrorAlreadyPrinted(status)) {
      std::fprintf(stderr, "strata: error: %s\n", std::string(status.message()).c_str());
    }
    return 1;
  }
  return 0;
}
