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
      WriteStderr("strata: SIGINT: stopped at once; swap files removed\n");
      break;
    case SIGTERM:
      WriteStderr("strata: SIGTERM: stopped at once; swap files removed\n");
      break;
    case SIGHUP:
      WriteStderr("strata: SIGHUP: stopped at once; swap files removed\n");
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

int MaybeRaiseFaultSignal(int step) {
  const char* value = std::getenv("STRATA_FAULT_SIGNAL");
  if (value == nullptr || *value == '\0') return 0;
  const std::string text = value;
  const size_t at = text.find('@');
  std::string name = text.substr(0, at);
  int times = 1;
  if (const size_t star = name.find('*'); star != std::string::npos) {
    if (!absl::SimpleAtoi(name.substr(star + 1), &times)) times = 0;
    name = name.substr(0, star);
  }
  int when = -1;
  int signal_number = name == "SIGINT"    ? SIGINT
                      : name == "SIGTERM" ? SIGTERM
                      : name == "SIGHUP"  ? SIGHUP
                      : name == "SIGPIPE" ? SIGPIPE
                      : name == "SIGKILL" ? SIGKILL  // a rank that dies
                      : name == "SIGSTOP" ? SIGSTOP  // a rank that hangs
                                          : 0;
  if (at == std::string::npos || !absl::SimpleAtoi(text.substr(at + 1), &when) ||
      signal_number == 0 || times < 1) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      spdlog::warn("STRATA_FAULT_SIGNAL='{}' ignored: expected SIGNAL[*N]@STEP", text);
    });
    return 0;
  }
  if (when != step) return 0;
  for (int i = 0; i < times; ++i) ::raise(signal_number);
  return signal_number;
}

}  // namespace strata
