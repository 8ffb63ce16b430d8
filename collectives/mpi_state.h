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

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "collectives/mpi_process.h"
#include "collectives/mpi_world.h"
#include "collectives/node_layout.h"
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

  // Duplicates MPI_COMM_WORLD (non-blocking, with the deadline), sets up the node layout
  // (checking that every rank has the same one) and opens the abort channel. With
  // `color` >= 0 the communicator is instead the ranks of MPI_COMM_WORLD that pass the same
  // color, in world rank order (MPI_Comm_split, which blocks: every rank must call it at
  // set-up), its layout named `group`.
  Status Open(int color = -1, const std::string& group = "");

  MpiProcess* process() const { return process_; }
  const MpiOptions& options() const { return options_; }

  const NodeLayout& layout() const { return layout_; }
  TrafficBytes sent() const {
    return TrafficBytes{sent_within_node_.load(), sent_across_nodes_.load()};
  }
  uint64_t hierarchical_collectives() const { return hierarchical_collectives_.load(); }

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

  // The node layout from the options (or MPI), agreed among the ranks with the deadline.
  Status OpenLayout(Clock::time_point deadline);
  // Polls `request` (under the process lock) until it completes, or past `deadline` marks
  // the process failed and returns kDeadlineExceeded: "CONTEXT: MISSING within T s".
  Status WaitForSetUp(MPI_Request* request, Clock::time_point deadline,
                      const std::string& context, const std::string& missing);
  // True when `job` takes the hierarchical path (the layout allows it and it is large).
  bool Hierarchical(const Job& job) const;
  int NodePeer(int local) const { return node_ * ranks_per_node_ + local; }
  int RailPeer(int node) const { return node * ranks_per_node_ + local_; }

  Status HierarchicalAllReduce(const Job& job, Clock::time_point deadline);
  Status HierarchicalReduceScatter(const Job& job, Clock::time_point deadline);
  Status HierarchicalAllGather(const Job& job, Clock::time_point deadline);

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

  NodeLayout layout_;
  bool hierarchical_ok_ = false;  // the layout allows the hierarchical path
  int node_ = 0;                  // this rank's node
  int local_ = 0;                 // its place on the node (rank - node * ranks_per_node)
  int ranks_per_node_ = 1;
  std::atomic<uint64_t> sent_within_node_{0};
  std::atomic<uint64_t> sent_across_nodes_{0};
  std::atomic<uint64_t> hierarchical_collectives_{0};

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

// ---------------------------------------------------------------------------------------
// The messages of one step of a collective, shared by the flat collectives (mpi_state.cc)
// and the hierarchical ones (mpi_hierarchical.cc): non-blocking sends and receives on the
// communicator under the collective's tag, the bytes sent counted within and across nodes,
// all waited for against the collective's deadline (an abort or a timeout fails the wait
// and cancels the rest). An Exchange belongs to the thread running its collective.

constexpr uint64_t kTagModulus = 32767;
// Largest single message of all-gather and broadcast (MPI counts are ints).
constexpr size_t kMaxMessageBytes = 256u << 20;

// Polling pauses: spin briefly, then yield, then sleep up to 1 ms, so ranks waiting on a
// slow peer leave the cores to it (several ranks often share a core here).
class Backoff {
 public:
  void Reset() { idle_since_ = Clock::now(); }
  void Pause() {
    const auto idle = Clock::now() - idle_since_;
    if (idle < std::chrono::microseconds(50)) return;
    if (idle < std::chrono::microseconds(500)) {
      std::this_thread::yield();
      return;
    }
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(idle).count();
    std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(1000, micros / 8)));
  }

 private:
  Clock::time_point idle_since_ = Clock::now();
};

// The non-blocking messages of one step of a collective, and the wait for all of them.
class State::Exchange {
 public:
  Exchange(State& state, const CollectiveCall& call, Clock::time_point deadline)
      : state_(state),
        call_(call),
        deadline_(deadline),
        tag_(static_cast<int>(call.sequence % kTagModulus)) {}

  // Buffers must stay valid until Wait returns.
  void Send(const void* data, size_t bytes, int peer) { Post(data, bytes, peer, false); }
  void Receive(void* data, size_t bytes, int peer) { Post(data, bytes, peer, true); }

  // Waits for every message posted since the last Wait; on failure cancels the rest.
  Status Wait() {
    Status status = WaitAll();
    if (!status.ok()) CancelAll();
    requests_.clear();
    messages_.clear();
    return status;
  }

 private:
  struct Message {
    int peer;
    bool receive;
    size_t bytes;
  };

  void Post(const void* data, size_t bytes, int peer, bool receive) {
    if (!post_error_.ok()) return;
    static char empty;  // MPI wants a valid address even for zero bytes
    void* buffer = bytes == 0 ? &empty : const_cast<void*>(data);
    MPI_Request request = MPI_REQUEST_NULL;
    int code;
    {
      auto lock = state_.process_->Lock();
      code = receive ? MPI_Irecv(buffer, static_cast<int>(bytes), MPI_BYTE, peer, tag_,
                                 state_.comm_, &request)
                     : MPI_Isend(buffer, static_cast<int>(bytes), MPI_BYTE, peer, tag_,
                                 state_.comm_, &request);
    }
    if (code != MPI_SUCCESS) {
      post_error_ =
          MpiError(code, receive ? "MPI_Irecv" : "MPI_Isend",
                   absl::StrCat(state_.Where(call_), ": ",
                                receive ? "receiving from" : "sending to", " rank ", peer));
      return;
    }
    requests_.push_back(request);
    messages_.push_back(Message{peer, receive, bytes});
    if (!receive) {
      auto& counter = state_.layout_.node_of_rank[peer] == state_.node_ ? state_.sent_within_node_
                                                                        : state_.sent_across_nodes_;
      counter.fetch_add(bytes, std::memory_order_relaxed);
    }
  }

  Status WaitAll() {
    RETURN_IF_ERROR(post_error_);
    size_t remaining = requests_.size();
    std::vector<int> indices(requests_.size());
    std::vector<MPI_Status> statuses(requests_.size());
    Backoff backoff;
    Report();
    while (remaining > 0) {
      int completed = 0;
      int code;
      {
        auto lock = state_.process_->Lock();
        code = MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &completed,
                            indices.data(), statuses.data());
      }
      if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
        return MpiError(code, "MPI_Testsome", state_.Where(call_));
      }
      if (completed == MPI_UNDEFINED) break;
      for (int k = 0; k < completed; ++k) {
        const Message& message = messages_[indices[k]];
        if (code == MPI_ERR_IN_STATUS && statuses[k].MPI_ERROR != MPI_SUCCESS) {
          return MessageError(message, statuses[k].MPI_ERROR);
        }
        if (message.receive) {
          int received = 0;
          MPI_Get_count(&statuses[k], MPI_BYTE, &received);
          if (static_cast<size_t>(received) != message.bytes) {
            return Disagreement(message, absl::StrCat(received));
          }
        }
        --remaining;
      }
      if (completed > 0) {
        backoff.Reset();
        Report();
        continue;
      }
      RETURN_IF_ERROR(state_.CheckAborted(call_));
      if (Clock::now() >= deadline_) return TimedOut();
      backoff.Pause();
    }
    return absl::OkStatus();
  }

  Status MessageError(const Message& message, int code) {
    if (message.receive && code == MPI_ERR_TRUNCATE) {
      return Disagreement(message, "more than that");
    }
    return MpiError(
        code, message.receive ? "MPI_Irecv" : "MPI_Isend",
        absl::StrCat(state_.Where(call_), ": ", message.receive ? "receiving from" : "sending to",
                     " rank ", message.peer));
  }

  Status Disagreement(const Message& message, const std::string& received) {
    return absl::InvalidArgumentError(
        absl::StrCat(state_.Where(call_), ": expected ", message.bytes, " bytes from rank ",
                     message.peer, ", received ", received,
                     ": the ranks issued different collectives (compare their "
                     "logs)"));
  }

  // Peers with a message still in flight: the ones that have not answered.
  std::set<int> Waiting() const {
    std::set<int> waiting;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] != MPI_REQUEST_NULL) waiting.insert(messages_[i].peer);
    }
    return waiting;
  }

  Status TimedOut() const {
    const std::set<int> waiting = Waiting();
    std::vector<int> answered;
    for (int peer = 0; peer < state_.size_; ++peer) {
      if (peer != state_.rank_ && waiting.count(peer) == 0) answered.push_back(peer);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        state_.Where(call_), " timed out after ", state_.options_.timeout_s,
        " s (zero.comm_timeout_s): no answer from rank(s) ", absl::StrJoin(waiting, ", "),
        answered.empty() ? "" : absl::StrCat(" (answered: ", absl::StrJoin(answered, ", "), ")"),
        "; such a rank died, hangs, or stopped issuing collectives"));
  }

  void Report() const {
    SetReportText(absl::StrCat("in ", DescribeCall(call_), " waiting for rank(s) ",
                               absl::StrJoin(Waiting(), ", ")));
  }

  // The request's buffer may still be written if a cancel does not take; the caller's
  // collective has failed and its buffers must not be reused (see mpi_communicator.h).
  void CancelAll() {
    auto lock = state_.process_->Lock();
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&request);
      MPI_Request_free(&request);
    }
  }

  State& state_;
  const CollectiveCall& call_;
  const Clock::time_point deadline_;
  const int tag_;
  std::vector<MPI_Request> requests_;
  std::vector<Message> messages_;
  Status post_error_;
};


}  // namespace mpi_internal
}  // namespace strata
