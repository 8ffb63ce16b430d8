// `strata report METRICS [--trace F] --out DIR`: report/report_run.h.
#include <memory>
#include <string>

#include "launch/commands.h"
#include "report/report_run.h"

namespace strata {

void AddReportCommand(CLI::App& app, Commands* commands) {
  struct Args {
    std::string metrics, trace, out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* report = app.add_subcommand(
      "report", "an HTML page of plots (loss, step time, memory, NVMe, overlap) from a run");
  report->add_option("metrics", args->metrics, "the run's --metrics file (JSONL)")->required();
  report->add_option("--trace", args->trace, "the run's --trace file: per-step overlap");
  report->add_option("--out", args->out, "directory for index.html")->required();
  commands->push_back(
      {report, [args]() { return RunReport(args->metrics, args->trace, args->out); }});
}

}  // namespace strata
