// Signals that stop a run: SIGINT, SIGTERM, SIGHUP and SIGPIPE (a closed pipe on stdout or
// stderr, e.g. `strata train 2>&1 | head`). Every such signal first removes the files
// registered with core/remove_on_signal.h (swap and lock files: a SIGKILL that follows,
// as mpirun sends after SIGTERM, then leaves nothing behind). Then:
// - inside a GracefulStop scope (the training loop), the first signal only asks for a
//   stop: StopSignal() returns it, and the loop stops at its next safe point (between
//   steps), cleans up and exits with 128 + the signal (130 SIGINT, 143 SIGTERM, 129
//   SIGHUP, 141 SIGPIPE); a second SIGINT, SIGTERM or SIGHUP ends the process at once
//   (_exit(128 + signal)) with one line on stderr;
// - outside it (set-up, benchmarks) the first signal ends the process at once likewise.
// A broken pipe repeats SIGPIPE on every later write: those never escalate.
// Thread-safety: everything may be called from any thread; the handler is async-signal-
// safe (atomics, unlink, write, _exit).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace strata {

// Installs the handlers (idempotent).
void InstallInterruptHandlers();

// While one is alive, the first stop signal is a request (see above).
class GracefulStop {
 public:
  GracefulStop();
  ~GracefulStop();
  GracefulStop(const GracefulStop&) = delete;
  GracefulStop& operator=(const GracefulStop&) = delete;
};

// The first stop signal received, or 0.
int StopSignal();
// Records a stop the ranks agreed on (rank_agreement.h's AgreeOnStop) in a process that
// did not receive the signal itself (another rank's, under mpirun), so that it exits with
// that signal's status too. A signal already received stays.
void NoteAgreedStop(int signal_number);
// "SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", else "signal N".
std::string SignalName(int signal_number);
// 128 + signal_number.
int ExitCodeForSignal(int signal_number);

// The line main() prints when a run stopped for a signal ("interrupted by SIGTERM after
// step 7 of 20; last checkpoint: ..."); set by the lead rank.
void SetInterruptSummary(const std::string& line);
std::string InterruptSummary();

// A fault the fault suite injects into the training loop (STRATA_FAULT_SIGNAL, read once at
// the top of the program), deterministic: "SIGTERM@3" raises SIGTERM in the lead rank's
// thread when the loop reaches step index 3 (after 3 steps finished); "SIGINT*2@3" raises
// it twice; SIGKILL and SIGSTOP stand for a rank that dies or hangs.
struct SignalFault {
  int signal_number = 0;
  int times = 1;
  int step = 0;
};
// "SIGNAL[*N]@STEP" (SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGKILL, SIGSTOP; N >= 1); "" is
// none; anything else kInvalidArgument naming the text.
StatusOr<std::optional<SignalFault>> ParseSignalFault(const std::string& text);
// Raises `fault`'s signal when `step` is its step (fault may be null). Returns the signal
// raised, or 0.
int MaybeRaiseFaultSignal(const SignalFault* fault, int step);

}  // namespace strata
