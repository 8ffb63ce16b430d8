// simgpu/nccl_state.h: one rank's communicator in the NCCL double: its rendezvous mapping,
// its first error (what ncclCommGetAsyncError reports), the sequence numbers that match its
// operations with the other ranks', and the count of operations enqueued but not yet run
// (what ncclCommFinalize flushes). Also the library's last error (ncclGetLastError) and the
// bounded, abortable wait every blocking step uses.
//
// Invariants: the first error wins and is never cleared; once a communicator has an error
// or was aborted, none of its operations moves data any more. An ncclComm_t handle holds a
// shared_ptr to its state and so does every enqueued operation, so a handle destroyed or
// aborted while work is queued leaves that work safe to run (it ends at once after an
// abort). Thread-safety: every member function is thread-safe.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "simgpu/nccl_shared.h"

namespace simgpu {
namespace nccl {

// The timeout of every wait, from STRATA_SIMGPU_NCCL_TIMEOUT_S (seconds, default 60).
// ncclInvalidUsage with `error` set when the variable is not a positive number.
ncclResult_t ReadTimeout(double* seconds, std::string* error);

// ncclGetLastError: the latest error any call or operation of this library recorded.
void SetLastError(const std::string& text);
const char* LastError();  // valid until this thread's next call

struct CommState {
  CommState(int rank, int nranks, int device, bool blocking, double timeout_s,
            std::unique_ptr<Rendezvous> rendezvous);
  ~CommState();

  // "rank R of N": how messages name this rank.
  std::string Who() const;

  // Records the communicator's first error (later ones only go to the last error), prints
  // it, and with `publish` makes it the rendezvous's failure so the other ranks' waits end.
  void Fail(ncclResult_t code, const std::string& text, bool publish);

  // ncclSuccess, ncclInProgress (joining, or finalizing with work queued) or the first
  // error; `text` (may be null) gets the error's description.
  ncclResult_t AsyncError(std::string* text);

  // True once this rank aborted or has an error: operations stop and new ones are refused.
  bool Stopped() const { return aborted.load() || failed.load(); }

  // Marks this rank gone from the rendezvous once its queued work is done, so a peer
  // waiting for it fails at once instead of at the timeout.
  void LeaveWhenIdle();
  // An enqueued operation finished (ran or was dropped).
  void OperationDone();

  const int rank;
  const int nranks;
  const int device;
  const bool blocking;
  const double timeout_s;
  const std::unique_ptr<Rendezvous> rendezvous;

  std::atomic<bool> joined{false};   // every rank joined: initialization done
  std::atomic<bool> aborted{false};  // ncclCommAbort on this rank
  std::atomic<bool> failed{false};   // `error` is set
  std::atomic<bool> finalizing{false};
  std::atomic<bool> leaving{false};  // destroyed or aborted: leave once idle
  std::atomic<int64_t> pending{0};   // operations enqueued and not done
  std::thread join_thread;           // non-blocking initialization

  // Sequence numbers, assigned as operations are launched (in call order, every rank the
  // same): guarded by `mutex`.
  std::mutex mutex;
  uint64_t next_collective = 0;
  uint64_t next_step = 1;
  std::vector<uint64_t> next_send;  // per peer
  std::vector<uint64_t> next_recv;  // per peer

 private:
  std::mutex error_mutex_;
  ncclResult_t error_ = ncclSuccess;
  std::string error_text_;
};

// A wait's pacing and bound: spins with yields, then sleeps up to 200 us between polls;
// expires `timeout_s` after the last Progressed().
class Waiter {
 public:
  explicit Waiter(double timeout_s);
  void Progressed();
  void Pause();
  bool Expired() const;
  // True about every 100 ms: time for the costlier checks (peers' processes alive).
  bool TimeToCheckPeers();
  double waited_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  const Clock::duration timeout_;
  Clock::time_point since_;
  Clock::time_point last_peer_check_;
  int idle_polls_ = 0;
};

// Waits for every rank to join `comm`'s rendezvous; then marks it joined. On failure
// (timeout, a peer's published failure, an exited peer, an abort) records the error on
// `comm` (publishing it, and removing the file on a timeout) and returns it.
ncclResult_t AwaitJoin(CommState& comm);

}  // namespace nccl
}  // namespace simgpu
