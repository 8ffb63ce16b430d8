// The faults the fault suite (tests/fault_suite_test.sh) injects into a whole run, read
// from the environment once, at the top of the program (launch/train_cli.cc), and passed
// down to where each acts: nothing below reads these variables.
// - STRATA_FAULT_NVME=KIND@N: every NVMe store's engine (nvme/fault_injection.h);
// - STRATA_FAULT_CHECKPOINT=kill|enospc@STEP:UNIT: the checkpoint writer
//   (checkpoint/checkpoint.h);
// - STRATA_FAULT_SIGNAL=SIGNAL[*N]@STEP: the training loop (session/interrupt.h);
// - STRATA_FAULT_TRACE_CLOCK=MS: rank k's trace clock reads k * MS milliseconds ahead (MS
//   may be negative), as if each rank's machine had its own clock: simulated nodes share
//   one, and the traces' alignment must undo it (core/trace.h, collectives/clock_sync.h).
// Thread-safety: plain values; FaultsFromEnvironment reads the environment.
#pragma once

#include <cstdint>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "core/status.h"
#include "nvme/fault_injection.h"
#include "session/interrupt.h"

namespace strata {

struct RunFaults {
  std::optional<nvme::FaultPlan> nvme;
  std::optional<CheckpointFault> checkpoint;
  std::optional<SignalFault> signal;
  int64_t trace_clock_skew_ms = 0;  // per rank: rank k's clock is k times this ahead
};

// The four variables parsed (unset or empty: none). A value that does not parse is
// kInvalidArgument naming the variable and the form expected, before any work starts.
StatusOr<RunFaults> FaultsFromEnvironment();

}  // namespace strata
