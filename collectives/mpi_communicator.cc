// MPI Communicator: fixed-order reductions over non-blocking point-to-point messages,
// polled against a deadline; an abort channel; the process-wide MPI guard. See
// mpi_communicator.h.
//
// Tags: collective #s uses tag s mod 32767 (MPI guarantees tags up to 32767), the abort
// channel tag 32767. A collective finishes all its messages before the next one starts
// (one stream, in order), and MPI never lets messages with the same source, tag and
// communicator overtake each other, so the segments and phases of one collective need no
// tags of their own.
#include "collectives/mpi_communicator.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "collectives/reduce.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAbortTag = 32767;
constexpr uint64_t kTagModulus = 32767;
constexpr size_t kAbortMessageBytes = 1024;
// Largest single message of all-gather and broadcast (MPI counts are ints).
constexpr size_t kMaxMessageBytes = 256u << 20;

// ---------------------------------------------------------------------------------------
// MPI results as Status, at the call site.

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return absl::StrCat("error ", code);
  return std::string(text, length);
}

Status MpiError(int code, const char* call, const std::string& context) {
  return absl::InternalError(
      absl::StrCat(context, ": ", call, " failed: ", MpiErrorText(code), " (code ", code, ")"));
}

#define MPI_RETURN_IF_ERROR(call, context)                                                    \
  do {                                                                                        \
    const int strata_mpi_code_ = (call);                                                      \
    if (strata_mpi_code_ != MPI_SUCCESS) return MpiError(strata_mpi_code_, #call, (context)); \
  } while (0)

// ---------------------------------------------------------------------------------------
// What a rank is doing, for the SIGTERM report: two buffers written by the thread running
// collectives and read, without locks, by the signal handler (a torn line is cosmetic).

struct TerminationReport {
  char prefix[128] = "strata MPI rank ?";
  char text[2][768] = {"outside any collective", "outside any collective"};
  std::atomic<int> active{0};
};
TerminationReport g_report;

void SetReportText(const std::string& text) {
  const int next = 1 - g_report.active.load();
  const size_t length = std::min(text.size(), sizeof(g_report.text[0]) - 1);
  std::memcpy(g_report.text[next], text.data(), length);
  g_report.text[next][length] = '\0';
  g_report.active.store(next);
}

void WriteAll(const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t written = write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= static_cast<size_t>(written);
  }
}

void OnTerminate(int signal_number) {
  WriteAll(g_report.prefix);
  WriteAll(
      ": terminated by SIGTERM (mpirun stops every rank when one dies or fails; look for "
      "the rank that did) while ");
  WriteAll(g_report.text[g_report.active.load()]);
  WriteAll("\n");
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

// ---------------------------------------------------------------------------------------
// The process: MPI_Init_thread once, MPI_Finalize at exit unless a collective failed.

std::atomic<bool> g_process_failed{false};

class MpiProcess {
 public:
  static StatusOr<MpiProcess*> Get() {
    static std::mutex mutex;
    static std::unique_ptr<MpiProcess> process;  // its destructor is the exit guard
    static Status init_status;
    static bool attempted = false;
    std::lock_guard<std::mutex> lock(mutex);
    if (!attempted) {
      attempted = true;
      auto created = std::unique_ptr<MpiProcess>(new MpiProcess());
      init_status = created->Init();
      if (init_status.ok()) process = std::move(created);
    }
    if (!init_status.ok()) return init_status;
    return process.get();
  }

  ~MpiProcess() {
    if (!initialized_by_us_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After a failed collective MPI_Finalize would wait for the dead or stuck peer: the
    // process exits without it and mpirun tears the job down.
    if (finalized || g_process_failed.load()) return;
    MPI_Finalize();
  }

  // Holds the process-wide MPI lock where MPI is only MPI_THREAD_SERIALIZED.
  std::unique_lock<std::mutex> Lock() {
    return multiple_ ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(mutex_);
  }

  const MpiWorld& world() const { return world_; }

 private:
  MpiProcess() = default;

  Status Init() {
    int initialized = 0;
    MPI_RETURN_IF_ERROR(MPI_Initialized(&initialized), "initializing MPI");
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      MPI_RETURN_IF_ERROR(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                          "initializing MPI");
      initialized_by_us_ = true;
      // Errors come back as codes (and become a Status) instead of aborting the job.
      MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                          "initializing MPI");
    } else {
      MPI_RETURN_IF_ERROR(MPI_Query_thread(&provided), "querying MPI's thread level");
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(
          absl::StrCat("MPI provides thread level ", provided,
                       "; strata runs collectives on a stream's "
                       "worker thread and needs at least MPI_THREAD_SERIALIZED (",
                       MPI_THREAD_SERIALIZED, ")"));
    }
    multiple_ = provided >= MPI_THREAD_MULTIPLE;

    const std::string context = "reading this process's place in MPI_COMM_WORLD";
    MPI_RETURN_IF_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &world_.rank), context);
    MPI_RETURN_IF_ERROR(MPI_Comm_size(MPI_COMM_WORLD, &world_.size), context);
    MPI_Comm node = MPI_COMM_NULL;
    MPI_RETURN_IF_ERROR(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_.rank,
                                            MPI_INFO_NULL, &node),
                        context);
    MPI_RETURN_IF_ERROR(MPI_Comm_rank(node, &world_.local_rank), context);
    MPI_RETURN_IF_ERROR(MPI_Comm_size(node, &world_.local_size), context);
    MPI_RETURN_IF_ERROR(MPI_Comm_free(&node), context);
    char host[MPI_MAX_PROCESSOR_NAME];
    int host_length = 0;
    MPI_RETURN_IF_ERROR(MPI_Get_processor_name(host, &host_length), context);
    world_.host.assign(host, host_length);

    std::snprintf(g_report.prefix, sizeof(g_report.prefix), "strata MPI rank %d of %d (%s)",
                  world_.rank, world_.size, world_.host.c_str());
    return absl::OkStatus();
  }

  bool initialized_by_us_ = false;
  bool multiple_ = false;
  std::mutex mutex_;
  MpiWorld world_;
};

// ---------------------------------------------------------------------------------------
// One communicator's shared state, kept alive by the communicator and its queued work.

struct Job {
  CollectiveCall call;
  const void* input = nullptr;
  void* output = nullptr;
};

class State {
 public:
  State(MpiProcess* process, const MpiOptions& options) : process_(process), options_(options) {}

  ~State() {
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

  // Duplicates MPI_COMM_WORLD (non-blocking, with the deadline) and opens the abort channel.
  Status Open() {
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
    return absl::OkStatus();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& host() const { return process_->world().host; }

  // Runs one collective on the calling (stream worker) thread.
  Status Run(const Job& job) {
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
    Status status = RunChecked(job);
    running_ = false;
    SetReportText("outside any collective");
    return status;
  }

  void Abort(const std::string& reason) {
    if (abort_called_.exchange(true)) return;
    std::string message = absl::StrCat("MPI rank ", rank_, " aborted the group: ", reason);
    message.resize(std::min(message.size(), kAbortMessageBytes - 1));
    Fail(absl::AbortedError(message), kNoSequence);
    abort_outbox_ = message;  // stays alive (and unchanged) for the sends below
    auto lock = process_->Lock();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      // Best effort: a peer that is gone cannot be told.
      if (MPI_Isend(abort_outbox_.data(), static_cast<int>(abort_outbox_.size() + 1), MPI_CHAR,
                    peer, kAbortTag, comm_, &request) == MPI_SUCCESS) {
        MPI_Request_free(&request);
      }
    }
  }

 private:
  static constexpr uint64_t kNoSequence = ~0ull;

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
  class Exchange {
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
    // collective has failed and its buffers must not be reused (see the header).
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

  std::string Who() const { return absl::StrCat("MPI rank ", rank_, " of ", size_); }
  std::string Where(const CollectiveCall& call) const {
    return absl::StrCat(Who(), ": ", DescribeCall(call));
  }

  Clock::time_point Deadline(Clock::time_point start) const {
    return start + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(options_.timeout_s));
  }

  // Keeps the first failure; marks the process failed (no MPI_Finalize at exit).
  void Fail(const Status& status, uint64_t sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return;
    failure_ = status;
    failure_sequence_ = sequence;
    failed_ = true;
    g_process_failed = true;
  }

  Status Failed(const CollectiveCall& call) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (call.sequence == failure_sequence_) return failure_;
    return Status(
        failure_.code(),
        absl::StrCat(Where(call), " not run: the communicator failed: ", failure_.message()));
  }

  // kAborted once this rank or a peer aborted the group.
  Status CheckAborted(const CollectiveCall& call) {
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

  Status RunChecked(const Job& job) {
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

  Status Dispatch(const Job& job, Clock::time_point deadline) {
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

  char* Scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  // Elements per peer chunk such that N-1 received chunks fit in the scratch budget.
  size_t ChunkCap(size_t element_bytes) const {
    const size_t peers = static_cast<size_t>(std::max(1, size_ - 1));
    return std::max<size_t>(1, options_.max_scratch_bytes / (peers * element_bytes));
  }

  // Scratch slot of peer j's chunk (rank order, skipping this rank).
  size_t Slot(int peer) const { return static_cast<size_t>(peer < rank_ ? peer : peer - 1); }

  Status AllReduce(const Job& job, Clock::time_point deadline) {
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

  Status ReduceScatter(const Job& job, Clock::time_point deadline) {
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
        sources[j] = j == rank_ ? input + (rank_ * count + begin) * element_bytes
                                : scratch + Slot(j) * bytes;
      }
      void* out = output + begin * element_bytes;  // may be the rank's own input chunk
      SumInRankOrder(sources.data(), size_, &out, 1, length, call.dtype);
    }
    return absl::OkStatus();
  }

  Status AllGather(const Job& job, Clock::time_point deadline) {
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

  Status Broadcast(const Job& job, Clock::time_point deadline) {
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

  Status Barrier(const Job& job, Clock::time_point deadline) {
    Exchange exchange(*this, job.call, deadline);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      exchange.Send(nullptr, 0, peer);
      exchange.Receive(nullptr, 0, peer);
    }
    return exchange.Wait();
  }

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
};

class MpiCommunicator : public CheckedCommunicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<State> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank(); }
  int world_size() const override { return state_->size(); }

  void Abort(const std::string& reason) override { state_->Abort(reason); }

  std::string Describe() const override {
    return absl::StrCat("MPI rank ", rank(), " of ", world_size(), " on host ", state_->host());
  }

 private:
  Status Issue(const CollectiveCall& call, const void* input, void* output,
               Stream& stream) override {
    const Job job{call, input, output};
    std::shared_ptr<State> state = state_;
    stream.EnqueueHost([state, job] { return state->Run(job); });
    return absl::OkStatus();
  }

  std::shared_ptr<State> state_;
};

}  // namespace

StatusOr<MpiWorld> GetMpiWorld() {
  ASSIGN_OR_RETURN(MpiProcess * process, MpiProcess::Get());
  return process->world();
}

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiOptions& options) {
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero.comm_timeout_s must be a positive number of seconds, got ", options.timeout_s));
  }
  if (options.max_scratch_bytes < (4u << 10) || options.max_scratch_bytes > (1u << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MPI max_scratch_bytes must be within 4 KiB .. 1 GiB, got ", options.max_scratch_bytes));
  }
  ASSIGN_OR_RETURN(MpiProcess * process, MpiProcess::Get());
  auto state = std::make_shared<State>(process, options);
  RETURN_IF_ERROR(state->Open());
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(state)));
}

void InstallMpiTerminationReport() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = &OnTerminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace strata
