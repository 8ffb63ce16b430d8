// One MPI communicator's shared state, private to collectives/: the fixed-order collectives
// over non-blocking point-to-point messages, polled against a deadline, and the abort
// channel. See mpi_communicator.h for the algorithms and the failure contract.
//
// Invariants: collectives run one at a time in sequence order (Run checks; a collective out
// of order or overlapping another fails the communicator); after the first failure the
// communicator stays failed and the process is marked failed (g_process_failed).
// Thread-safety: Open once, before anything else; Run on the stream's worker thread (kept
// alive by the communicator and its queued work through a shared_ptr); Abort, rank, size and
// host from any thread.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/mpi_process.h"
#include "collectives/mpi_world.h"
#include "collectives/start_watch.h"

namespace strata {
namespace mpi_internal {

using Clock = std::chrono::steady_clock;

// The longest abort reason sent to the peers, with its terminating zero.
constexpr size_t kAbortMessageBytes = 1024;

// One accepted collective and its buffers, as queued on the stream.
struct Job {
  CollectiveCall call;
  const void* input = nullptr;
  void* output = nullptr;
};

// One communicator's shared state, kept alive by the communicator and its queued work.
class State {
 public:
  State(MpiProcess* process, const MpiOptions& options) : process_(process), options_(options) {}
  ~State();

  // Duplicates MPI_COMM_WORLD (non-blocking, with the deadline) and opens the abort channel.
  Status Open();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& host() const { return process_->world().host; }
  int local_rank() const { return process_->world().local_rank; }
  int local_size() const { return process_->world().local_size; }

  // Runs one collective on the calling (stream worker) thread.
  Status Run(const Job& job);

  // Fails this communicator with kAborted and sends the reason to every peer (best effort).
  void Abort(const std::string& reason);

  // The collective `call` was enqueued on the stream named `stream`: followed until it
  // starts (one that never starts fails the communicator after the timeout, telling the
  // peers; see start_watch.h).
  void Issued(const CollectiveCall& call, const std::string& stream);

 private:
  static constexpr uint64_t kNoSequence = ~0ull;

  class Exchange;  // the messages of one step of a collective (mpi_state.cc)

  std::string Who() const;
  std::string Where(const CollectiveCall& call) const;
  Clock::time_point Deadline(Clock::time_point start) const;

  // Keeps the first failure; marks the process failed (no MPI_Finalize at exit).
  void Fail(const Status& status, uint64_t sequence);
  // Fail, then sends the message to every peer through the abort channel (once).
  void FailAndTell(const Status& status, uint64_t sequence);
  Status Failed(const CollectiveCall& call);
  // kAborted once this rank or a peer aborted the group.
  Status CheckAborted(const CollectiveCall& call);

  Status RunChecked(const Job& job);
  Status Dispatch(const Job& job, Clock::time_point deadline);

  char* Scratch(size_t bytes);
  // Elements per peer chunk such that N-1 received chunks fit in the scratch budget.
  size_t ChunkCap(size_t element_bytes) const;
  // Scratch slot of peer j's chunk (rank order, skipping this rank).
  size_t Slot(int peer) const { return static_cast<size_t>(peer < rank_ ? peer : peer - 1); }

  Status AllReduce(const Job& job, Clock::time_point deadline);
  Status ReduceScatter(const Job& job, Clock::time_point deadline);
  Status AllGather(const Job& job, Clock::time_point deadline);
  Status Broadcast(const Job& job, Clock::time_point deadline);
  Status Barrier(const Job& job, Clock::time_point deadline);

  MpiProcess* const process_;
  const MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;

  // The abort channel: a receive from any peer, posted for the communicator's lifetime.
  std::array<char, kAbortMessageBytes> abort_inbox_{};
  MPI_Request abort_receive_ = MPI_REQUEST_NULL;
  std::string abort_outbox_;
  std::atomic<bool> abort_called_{false};

  std::mutex mutex_;  // guards failure_ and failure_sequence_
  Status failure_;
  uint64_t failure_sequence_ = kNoSequence;
  std::atomic<bool> failed_{false};

  std::atomic<uint64_t> next_to_run_{0};
  std::atomic<bool> running_{false};
  std::vector<char> scratch_;  // used by the running collective only
  std::unique_ptr<StartWatch> watch_;  // made by Open; stopped first by the destructor
};

}  // namespace mpi_internal
}  // namespace strata
