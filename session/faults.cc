// See faults.h.
#include "session/faults.h"

#include <cstdlib>
#include <string>

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
  return faults;
}

}  // namespace strata
