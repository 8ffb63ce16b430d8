// Stop signals; see interrupt.h.
#include "session/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/remove_on_signal.h"

namespace strata {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_count{0};  // INT/TERM/HUP received
std::atomic<int> g_graceful{0};    // live GracefulStop scopes
std::once_flag g_installed;

std::mutex g_summary_mutex;
std::string* g_summary = nullptr;

void WriteStderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

[[noreturn]] void ExitNow(int signal_number) {
  switch (signal_number) {
    case SIGINT:
      WriteStderr("strata: SIGINT: stopped at once; its unfinished files (swap, lock, partial "
                  "outputs) removed\n");
      break;
    case SIGTERM:
      WriteStderr("strata: SIGTERM: stopped at once; its unfinished files (swap, lock, partial "
                  "outputs) removed\n");
      break;
    case SIGHUP:
      WriteStderr("strata: SIGHUP: stopped at once; its unfinished files (swap, lock, partial "
                  "outputs) removed\n");
      break;
    default:
      break;  // SIGPIPE: the terminal may be gone
  }
  ::_exit(128 + signal_number);
}

void Handle(int signal_number) {
  const int saved_errno = errno;
  RemoveRegisteredPaths();  // first: a SIGKILL may follow
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal_number);
  const bool graceful = g_graceful.load() > 0;
  if (signal_number == SIGPIPE) {
    if (!graceful) ExitNow(signal_number);
  } else if (g_stop_count.fetch_add(1) > 0 || !graceful) {
    ExitNow(signal_number);
  }
  errno = saved_errno;
}

}  // namespace

void InstallInterruptHandlers() {
  std::call_once(g_installed, [] {
    struct sigaction action {};
    action.sa_handler = Handle;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
      ::sigaction(signal_number, &action, nullptr);
    }
  });
}

GracefulStop::GracefulStop() { g_graceful.fetch_add(1); }
GracefulStop::~GracefulStop() { g_graceful.fetch_sub(1); }

int StopSignal() { return g_stop_signal.load(); }

void NoteAgreedStop(int signal_number) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal_number);
}

std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return absl::StrCat("signal ", signal_number);
  }
}

int ExitCodeForSignal(int signal_number) { return 128 + signal_number; }

void SetInterruptSummary(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_summary_mutex);
  if (g_summary == nullptr) g_summary = new std::string();
  *g_summary = line;
}

std::string InterruptSummary() {
  std::lock_guard<std::mutex> lock(g_summary_mutex);
  return g_summary == nullptr ? std::string() : *g_summary;
}

StatusOr<std::optional<SignalFault>> ParseSignalFault(const std::string& text) {
  if (text.empty()) return std::optional<SignalFault>();
  const size_t at = text.find('@');
  std::string name = text.substr(0, at);
  SignalFault fault;
  bool valid = true;
  if (const size_t star = name.find('*'); star != std::string::npos) {
    valid = absl::SimpleAtoi(name.substr(star + 1), &fault.times) && fault.times >= 1;
    name = name.substr(0, star);
  }
  fault.signal_number = name == "SIGINT"    ? SIGINT
                        : name == "SIGTERM" ? SIGTERM
                        : name == "SIGHUP"  ? SIGHUP
                        : name == "SIGPIPE" ? SIGPIPE
                        : name == "SIGKILL" ? SIGKILL  // a rank that dies
                        : name == "SIGSTOP" ? SIGSTOP  // a rank that hangs
                                            : 0;
  if (!valid || at == std::string::npos || !absl::SimpleAtoi(text.substr(at + 1), &fault.step) ||
      fault.signal_number == 0 || fault.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': expected SIGNAL[*N]@STEP (SIGINT, SIGTERM, SIGHUP, "
                     "SIGPIPE, SIGKILL or SIGSTOP; N >= 1)"));
  }
  return std::optional<SignalFault>(fault);
}

int MaybeRaiseFaultSignal(const SignalFault* fault, int step) {
  if (fault == nullptr || fault->step != step) return 0;
  for (int i = 0; i < fault->times; ++i) ::raise(fault->signal_number);
  return fault->signal_number;
}

}  // namespace strata
