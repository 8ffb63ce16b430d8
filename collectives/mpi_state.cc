// The per-communicator State of the MPI Communicator: fixed-order collectives over
// non-blocking point-to-point messages, each wait polled against the collective's deadline,
// and the abort channel. See mpi_state.h and, for the algorithms, mpi_communicator.h.
//
// Tags: collective #s uses tag s mod 32767 (MPI guarantees tags up to 32767), the abort
// channel tag 32767. A collective finishes all its messages before the next one starts
// (one stream, in order), and MPI never lets messages with the same source, tag and
// communicator overtake each other, so the segments and phases of one collective need no
// tags of their own.
// Reductions sum the N sources in rank order 0..N-1 (SumInRankOrder, reduce.h), as the
// local and NCCL communicators do: any other order would change the bits.
#include "collectives/mpi_state.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_join.h"
#include "collectives/reduce.h"

namespace strata {
namespace mpi_internal {
namespace {

constexpr int kAbortTag = 32767;
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

}  // namespace

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

State::~State() {
  watch_.reset();  // no failure from its thread while the communicator closes
  if (comm_ == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failure, requests may still be pending on this communicator: leave it be.
  if (finalized || failed_.load() || g_process_failed.load()) return;
  auto lock = process_->Lock();
  if (abort_receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&abort_receive_);
    MPI_Wait(&abort_receive_, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm_);
}

Status State::Open() {
  const std::string context = "creating an MPI communicator over MPI_COMM_WORLD";
  MPI_Request request = MPI_REQUEST_NULL;
  {
    auto lock = process_->Lock();
    MPI_RETURN_IF_ERROR(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), context);
  }
  const auto deadline = Deadline(Clock::now());
  Backoff backoff;
  while (true) {
    int done = 0;
    {
      auto lock = process_->Lock();
      MPI_RETURN_IF_ERROR(MPI_Test(&request, &done, MPI_STATUS_IGNORE), context);
    }
    if (done) break;
    if (Clock::now() >= deadline) {
      g_process_failed = true;
      comm_ = MPI_COMM_NULL;
      return absl::DeadlineExceededError(absl::StrCat(
          context, ": not every one of the ", process_->world().size, " processes joined within ",
          options_.timeout_s, " s (zero.comm_timeout_s)"));
    }
    backoff.Pause();
  }
  auto lock = process_->Lock();
  MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), context);
  MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm_, &rank_), context);
  MPI_RETURN_IF_ERROR(MPI_Comm_size(comm_, &size_), context);
  MPI_RETURN_IF_ERROR(MPI_Irecv(abort_inbox_.data(), kAbortMessageBytes, MPI_CHAR, MPI_ANY_SOURCE,
                                kAbortTag, comm_, &abort_receive_),
                      context);
  watch_ = std::make_unique<StartWatch>(
      Who(), options_.timeout_s,
      [this](const Status& status, uint64_t sequence) { FailAndTell(status, sequence); });
  return absl::OkStatus();
}

Status State::Run(const Job& job) {
  const CollectiveCall& call = job.call;
  const uint64_t expected = next_to_run_.fetch_add(1);
  if (expected != call.sequence || running_.exchange(true)) {
    // This rank's sequence no longer matches its peers': the communicator is unusable.
    Fail(absl::FailedPreconditionError(absl::StrCat(
             Where(call), " ran out of order (expected #", expected,
             ") or overlapped another collective; issue every collective of a communicator "
             "on one stream")),
         call.sequence);
    return Failed(call);
  }
  if (watch_ != nullptr) watch_->Started(call.sequence);
  Status status = RunChecked(job);
  if (watch_ != nullptr) watch_->Finished();
  running_ = false;
  SetReportText("outside any collective");
  return status;
}

void State::Abort(const std::string& reason) {
  FailAndTell(absl::AbortedError(absl::StrCat("MPI rank ", rank_, " aborted the group: ", reason)),
              kNoSequence);
}

void State::Issued(const CollectiveCall& call, const std::string& stream) {
  if (watch_ != nullptr) watch_->Issued(call, stream);
}

void State::FailAndTell(const Status& status, uint64_t sequence) {
  if (abort_called_.exchange(true)) return;
  std::string message(status.message());
  message.resize(std::min(message.size(), kAbortMessageBytes - 1));
  Fail(Status(status.code(), message), sequence);
  abort_outbox_ = message;  // stays alive (and unchanged) for the sends below
  auto lock = process_->Lock();
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    // Best effort: a peer that is gone cannot be told.
    if (MPI_Isend(abort_outbox_.data(), static_cast<int>(abort_outbox_.size() + 1), MPI_CHAR, peer,
                  kAbortTag, comm_, &request) == MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
}

std::string State::Who() const { return absl::StrCat("MPI rank ", rank_, " of ", size_); }

std::string State::Where(const CollectiveCall& call) const {
  return absl::StrCat(Who(), ": ", DescribeCall(call));
}

Clock::time_point State::Deadline(Clock::time_point start) const {
  return start + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(options_.timeout_s));
}

void State::Fail(const Status& status, uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return;
  failure_ = status;
  failure_sequence_ = sequence;
  failed_ = true;
  g_process_failed = true;
}

Status State::Failed(const CollectiveCall& call) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (call.sequence == failure_sequence_) return failure_;
  return Status(
      failure_.code(),
      absl::StrCat(Where(call), " not run: the communicator failed: ", failure_.message()));
}

Status State::CheckAborted(const CollectiveCall& call) {
  if (abort_called_.load()) return absl::AbortedError("this rank aborted the group");
  int arrived = 0;
  MPI_Status status;
  {
    auto lock = process_->Lock();
    if (abort_receive_ == MPI_REQUEST_NULL) return absl::OkStatus();
    MPI_RETURN_IF_ERROR(MPI_Test(&abort_receive_, &arrived, &status),
                        absl::StrCat(Where(call), ": checking for an abort"));
  }
  if (!arrived) return absl::OkStatus();
  abort_inbox_.back() = '\0';
  return absl::AbortedError(absl::StrCat(Where(call), ": ", abort_inbox_.data()));
}

Status State::RunChecked(const Job& job) {
  const CollectiveCall& call = job.call;
  if (failed_.load()) return Failed(call);
  Status status = CheckAborted(call);
  if (status.ok()) {
    SetReportText(absl::StrCat("in ", DescribeCall(call)));
    status = Dispatch(job, Deadline(Clock::now()));
  }
  if (status.ok()) return status;
  Fail(status, call.sequence);
  return Failed(call);
}

Status State::Dispatch(const Job& job, Clock::time_point deadline) {
  switch (job.call.op) {
    case CollectiveOp::kAllReduce:
      return AllReduce(job, deadline);
    case CollectiveOp::kReduceScatter:
      return ReduceScatter(job, deadline);
    case CollectiveOp::kAllGather:
      return AllGather(job, deadline);
    case CollectiveOp::kBroadcast:
      return Broadcast(job, deadline);
    case CollectiveOp::kBarrier:
      return Barrier(job, deadline);
  }
  return absl::InternalError("unknown collective");
}

char* State::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

size_t State::ChunkCap(size_t element_bytes) const {
  const size_t peers = static_cast<size_t>(std::max(1, size_ - 1));
  return std::max<size_t>(1, options_.max_scratch_bytes / (peers * element_bytes));
}

Status State::AllReduce(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const size_t element_bytes = DTypeBytes(call.dtype);
  char* data = static_cast<char*>(job.output);
  const size_t n = static_cast<size_t>(size_);
  if (size_ == 1 || call.count == 0) return absl::OkStatus();
  const size_t segment_cap = ChunkCap(element_bytes) * n;
  std::vector<const void*> sources(n);
  for (size_t begin = 0; begin < call.count; begin += segment_cap) {
    const size_t length = std::min(segment_cap, call.count - begin);
    const size_t chunk = (length + n - 1) / n;
    auto chunk_begin = [&](size_t j) { return begin + std::min(length, j * chunk); };
    auto chunk_length = [&](size_t j) {
      return std::min(length, (j + 1) * chunk) - std::min(length, j * chunk);
    };
    const size_t mine = chunk_length(rank_);
    char* my_chunk = data + chunk_begin(rank_) * element_bytes;
    char* scratch = Scratch((n - 1) * chunk * element_bytes);

    // Reduce-scatter: chunk j goes to its owner j, which sums all N in rank order.
    Exchange scatter(*this, call, deadline);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const size_t theirs = chunk_length(peer);
      if (theirs > 0) {
        scatter.Send(data + chunk_begin(peer) * element_bytes, theirs * element_bytes, peer);
      }
      if (mine > 0) {
        scatter.Receive(scratch + Slot(peer) * chunk * element_bytes, mine * element_bytes, peer);
      }
    }
    RETURN_IF_ERROR(scatter.Wait());
    if (mine > 0) {
      for (int j = 0; j < size_; ++j) {
        sources[j] = j == rank_ ? my_chunk : scratch + Slot(j) * chunk * element_bytes;
      }
      void* output = my_chunk;
      SumInRankOrder(sources.data(), size_, &output, 1, mine, call.dtype);
    }

    // All-gather: every owner sends its reduced chunk to every rank.
    Exchange gather(*this, call, deadline);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (mine > 0) gather.Send(my_chunk, mine * element_bytes, peer);
      const size_t theirs = chunk_length(peer);
      if (theirs > 0) {
        gather.Receive(data + chunk_begin(peer) * element_bytes, theirs * element_bytes, peer);
      }
    }
    RETURN_IF_ERROR(gather.Wait());
  }
  return absl::OkStatus();
}

Status State::ReduceScatter(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const size_t element_bytes = DTypeBytes(call.dtype);
  const char* input = static_cast<const char*>(job.input);
  char* output = static_cast<char*>(job.output);
  const size_t count = call.count;
  if (count == 0) return absl::OkStatus();
  if (size_ == 1) {
    if (output != input) std::memcpy(output, input, count * element_bytes);
    return absl::OkStatus();
  }
  const size_t segment_cap = ChunkCap(element_bytes);
  std::vector<const void*> sources(size_);
  for (size_t begin = 0; begin < count; begin += segment_cap) {
    const size_t length = std::min(segment_cap, count - begin);
    const size_t bytes = length * element_bytes;
    char* scratch = Scratch((size_ - 1) * bytes);
    Exchange exchange(*this, call, deadline);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      exchange.Send(input + (peer * count + begin) * element_bytes, bytes, peer);
      exchange.Receive(scratch + Slot(peer) * bytes, bytes, peer);
    }
    RETURN_IF_ERROR(exchange.Wait());
    for (int j = 0; j < size_; ++j) {
      sources[j] =
          j == rank_ ? input + (rank_ * count + begin) * element_bytes : scratch + Slot(j) * bytes;
    }
    void* out = output + begin * element_bytes;  // may be the rank's own input chunk
    SumInRankOrder(sources.data(), size_, &out, 1, length, call.dtype);
  }
  return absl::OkStatus();
}

Status State::AllGather(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const size_t element_bytes = DTypeBytes(call.dtype);
  const size_t count = call.count;
  char* output = static_cast<char*>(job.output);
  char* mine = output + rank_ * count * element_bytes;
  if (count == 0) return absl::OkStatus();
  if (job.input != mine) std::memcpy(mine, job.input, count * element_bytes);
  const size_t segment_cap = std::max<size_t>(1, kMaxMessageBytes / element_bytes);
  for (size_t begin = 0; begin < count && size_ > 1; begin += segment_cap) {
    const size_t bytes = std::min(segment_cap, count - begin) * element_bytes;
    Exchange exchange(*this, call, deadline);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      exchange.Send(mine + begin * element_bytes, bytes, peer);
      exchange.Receive(output + (peer * count + begin) * element_bytes, bytes, peer);
    }
    RETURN_IF_ERROR(exchange.Wait());
  }
  return absl::OkStatus();
}

Status State::Broadcast(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const size_t element_bytes = DTypeBytes(call.dtype);
  char* data = static_cast<char*>(job.output);
  const size_t segment_cap = std::max<size_t>(1, kMaxMessageBytes / element_bytes);
  for (size_t begin = 0; begin < call.count && size_ > 1; begin += segment_cap) {
    const size_t bytes = std::min(segment_cap, call.count - begin) * element_bytes;
    Exchange exchange(*this, call, deadline);
    if (rank_ == call.root) {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank_) exchange.Send(data + begin * element_bytes, bytes, peer);
      }
    } else {
      exchange.Receive(data + begin * element_bytes, bytes, call.root);
    }
    RETURN_IF_ERROR(exchange.Wait());
  }
  return absl::OkStatus();
}

Status State::Barrier(const Job& job, Clock::time_point deadline) {
  Exchange exchange(*this, job.call, deadline);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    exchange.Send(nullptr, 0, peer);
    exchange.Receive(nullptr, 0, peer);
  }
  return exchange.Wait();
}

}  // namespace mpi_internal
}  // namespace strata
