// See faults.h.
#include "session/faults.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

std::string Variable(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

StatusOr<RunFaults> FaultsFromEnvironment() {
  RunFaults faults;
  StatusOr<std::optional<nvme::FaultPlan>> nvme =
      nvme::ParseFaultPlan(Variable("STRATA_FAULT_NVME"));
  if (!nvme.ok()) return Annotate(nvme.status(), "STRATA_FAULT_NVME");
  faults.nvme = *nvme;
  StatusOr<std::optional<CheckpointFault>> checkpoint =
      ParseCheckpointFault(Variable("STRATA_FAULT_CHECKPOINT"));
  if (!checkpoint.ok()) return Annotate(checkpoint.status(), "STRATA_FAULT_CHECKPOINT");
  faults.checkpoint = *checkpoint;
  StatusOr<std::optional<SignalFault>> signal = ParseSignalFault(Variable("STRATA_FAULT_SIGNAL"));
  if (!signal.ok()) return Annotate(signal.status(), "STRATA_FAULT_SIGNAL");
  faults.signal = *signal;
  if (const std::string skew = Variable("STRATA_FAULT_TRACE_CLOCK"); !skew.empty()) {
    // Within +-1e6 ms per rank, so that a rank's skew (times up to a few thousand ranks)
    // stays far from the nanosecond clock's range.
    if (!absl::SimpleAtoi(skew, &faults.trace_clock_skew_ms) ||
        std::abs(faults.trace_clock_skew_ms) > 1'000'000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "STRATA_FAULT_TRACE_CLOCK=", skew,
          ": expected milliseconds per rank, an integer within +-1000000"));
    }
  }
  return faults;
}

}  // namespace strata
