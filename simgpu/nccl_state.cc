// simgpu/nccl_state.cc: see nccl_state.h.
#include "simgpu/nccl_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace simgpu {
namespace nccl {
namespace {

std::mutex g_last_error_mutex;
std::string* g_last_error = new std::string();  // never destroyed: stream threads outlive main

}  // namespace

ncclResult_t ReadTimeout(double* seconds, std::string* error) {
  *seconds = 60;
  const char* text = std::getenv("STRATA_SIMGPU_NCCL_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return ncclSuccess;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(value) || !(value > 0)) {
    *error = std::string(
                 "STRATA_SIMGPU_NCCL_TIMEOUT_S must be a positive number of seconds, "
                 "got '") +
             text + "'";
    return ncclInvalidUsage;
  }
  *seconds = value;
  return ncclSuccess;
}

void SetLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_last_error_mutex);
  *g_last_error = text;
}

const char* LastError() {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(g_last_error_mutex);
  copy = *g_last_error;
  return copy.c_str();
}

CommState::CommState(int rank, int nranks, int device, bool blocking, double timeout_s,
                     std::unique_ptr<Rendezvous> rendezvous)
    : rank(rank),
      nranks(nranks),
      device(device),
      blocking(blocking),
      timeout_s(timeout_s),
      rendezvous(std::move(rendezvous)),
      next_send(nranks, 0),
      next_recv(nranks, 0) {}

CommState::~CommState() {
  if (join_thread.joinable()) join_thread.join();
}

std::string CommState::Who() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(nranks);
}

void CommState::Fail(ncclResult_t code, const std::string& text, bool publish) {
  const std::string full = "simgpu NCCL " + Who() + ": " + text;
  SetLastError(full);
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (failed.load()) return;
    error_ = code;
    error_text_ = full;
    // Printed before the failure is visible: a rank that sees it and exits must not cut the
    // report off.
    std::fprintf(stderr, "%s\n", full.c_str());
    std::fflush(stderr);
    failed.store(true);
  }
  if (publish) rendezvous->PublishFailure(rank, Who() + ": " + text);
}

ncclResult_t CommState::AsyncError(std::string* text) {
  if (failed.load()) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (text != nullptr) *text = error_text_;
    return error_;
  }
  if (!joined.load()) return ncclInProgress;
  if (finalizing.load() && pending.load() > 0) return ncclInProgress;
  return ncclSuccess;
}

void CommState::LeaveWhenIdle() {
  leaving.store(true);
  if (pending.load() == 0) AtomicStore(&rendezvous->control(rank)->left, 1);
}

void CommState::OperationDone() {
  if (pending.fetch_sub(1) == 1 && leaving.load()) {
    AtomicStore(&rendezvous->control(rank)->left, 1);
  }
}

Waiter::Waiter(double timeout_s)
    : timeout_(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
      since_(Clock::now()),
      last_peer_check_(since_) {}

void Waiter::Progressed() {
  since_ = Clock::now();
  idle_polls_ = 0;
}

void Waiter::Pause() {
  ++idle_polls_;
  if (idle_polls_ < 64) {
    std::this_thread::yield();
    return;
  }
  const int shift = std::min(idle_polls_ - 64, 8);
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, 1 << shift)));
}

bool Waiter::Expired() const { return Clock::now() - since_ > timeout_; }

bool Waiter::TimeToCheckPeers() {
  const Clock::time_point now = Clock::now();
  if (now - last_peer_check_ < std::chrono::milliseconds(100)) return false;
  last_peer_check_ = now;
  return true;
}

double Waiter::waited_s() const {
  return std::chrono::duration<double>(Clock::now() - since_).count();
}

ncclResult_t AwaitJoin(CommState& comm) {
  Rendezvous& rendezvous = *comm.rendezvous;
  Waiter waiter(comm.timeout_s);
  int seen = -1;
  while (true) {
    const int joined = rendezvous.Joined();
    if (joined == comm.nranks) {
      comm.joined.store(true);
      return ncclSuccess;
    }
    if (joined != seen) {
      seen = joined;
      waiter.Progressed();
    }
    if (comm.aborted.load()) {
      comm.Fail(ncclInvalidUsage, "aborted (ncclCommAbort) during initialization", false);
      rendezvous.Unlink();
      return ncclInvalidUsage;
    }
    int failed_rank = -1;
    std::string failure;
    if (rendezvous.Failure(&failed_rank, &failure)) {
      comm.Fail(ncclRemoteError, "initialization failed: " + failure, false);
      rendezvous.Unlink();
      return ncclRemoteError;
    }
    if (waiter.TimeToCheckPeers()) {
      for (int r = 0; r < comm.nranks; ++r) {
        const std::string dead = rendezvous.DeadPeer(r);
        if (!dead.empty()) {
          comm.Fail(ncclRemoteError, "initialization failed: " + dead, true);
          rendezvous.Unlink();
          return ncclRemoteError;
        }
      }
    }
    if (waiter.Expired()) {
      std::string missing;
      for (int r = 0; r < comm.nranks; ++r) {
        if (AtomicLoad(&rendezvous.control(r)->claimed) == 0) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      char waited[32];
      std::snprintf(waited, sizeof(waited), "%.3g", comm.timeout_s);
      comm.Fail(ncclSystemError,
                std::string("initialization: waited ") + waited +
                    " s (STRATA_SIMGPU_NCCL_TIMEOUT_S) for rank(s) " + missing +
                    " to join (ncclCommInitRankConfig with the same id); " +
                    std::to_string(joined) + " of " + std::to_string(comm.nranks) + " joined",
                true);
      rendezvous.Unlink();  // a late rank then fails at once instead of waiting alone
      return ncclSystemError;
    }
    waiter.Pause();
  }
}

}  // namespace nccl
}  // namespace simgpu
