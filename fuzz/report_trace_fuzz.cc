// Fuzz target: a trace file for `strata report --trace` (report/report.h, ReadTrace and
// SummarizeTrace): Chrome trace JSON, its traceEvents, the "steps" track, spans, waits and
// counters clipped to each step. A trace that summarizes is rendered into the page with
// one metrics record.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_scratch.h"
#include "report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("trace.json", data, size);
  strata::StatusOr<nlohmann::json> trace = strata::ReadTrace(path);
  if (!trace.ok()) return 0;
  auto overlap = strata::SummarizeTrace(*trace);
  if (!overlap.ok()) return 0;
  const std::vector<nlohmann::json> metrics = {{{"step", 1}, {"loss", 4.5}}};
  (void)strata::RenderReport("fuzz", metrics, *overlap, "");
  return 0;
}
