// Fuzz target: a metrics file for `strata report` (report/report.h, ReadMetrics): JSONL
// records, each an object with "step" and fields that are numbers, null or objects; steps
// repeated by a resumed run. Records that read are rendered into the page (RenderReport,
// without Chart.js), which reads every field a plot takes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_scratch.h"
#include "report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("metrics.jsonl", data, size);
  auto metrics = strata::ReadMetrics(path);
  if (!metrics.ok()) return 0;
  (void)strata::RenderReport("fuzz", *metrics, std::nullopt, "");
  return 0;
}
