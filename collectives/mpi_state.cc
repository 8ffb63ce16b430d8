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

}  // namespace

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

Status State::Open(int color, const std::string& group) {
  const std::string context =
      color < 0 ? std::string("creating an MPI communicator over MPI_COMM_WORLD")
                : absl::StrCat("creating the MPI communicator of ", group);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    auto lock = process_->Lock();
    if (color >= 0) {
      // No non-blocking split in MPI 3; the ranks come here together at set-up.
      MPI_RETURN_IF_ERROR(
          MPI_Comm_split(MPI_COMM_WORLD, color, process_->world().rank, &comm_), context);
    } else {
      MPI_RETURN_IF_ERROR(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), context);
    }
  }
  const auto deadline = Deadline(Clock::now());
  if (color < 0) {
    Status joined = WaitForSetUp(
        &request, deadline, context,
        absl::StrCat("not every one of the ", process_->world().size, " processes joined"));
    if (!joined.ok()) {
      if (absl::IsDeadlineExceeded(joined)) comm_ = MPI_COMM_NULL;
      return joined;
    }
  }
  {
    auto lock = process_->Lock();
    MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), context);
    MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm_, &rank_), context);
    MPI_RETURN_IF_ERROR(MPI_Comm_size(comm_, &size_), context);
  }
  RETURN_IF_ERROR(OpenLayout(deadline));
  if (!group.empty()) layout_.source = group;
  auto lock = process_->Lock();
  MPI_RETURN_IF_ERROR(MPI_Irecv(abort_inbox_.data(), kAbortMessageBytes, MPI_CHAR, MPI_ANY_SOURCE,
                                kAbortTag, comm_, &abort_receive_),
                      context);
  watch_ = std::make_unique<StartWatch>(
      Who(), options_.timeout_s,
      [this](const Status& status, uint64_t sequence) { FailAndTell(status, sequence); });
  return absl::OkStatus();
}

Status State::OpenLayout(Clock::time_point deadline) {
  if (options_.ranks_per_node > 0) {
    ASSIGN_OR_RETURN(layout_, OverriddenLayout(size_, options_.ranks_per_node));
  } else {
    layout_ = DiscoveredLayout(process_->world().first_rank_of_node);
    if (layout_.world() != size_) {
      return absl::InternalError(absl::StrCat(Who(), ": MPI reported the nodes of ",
                                              layout_.world(), " ranks in a world of ", size_));
    }
  }
  node_ = layout_.node_of_rank[rank_];
  ranks_per_node_ = std::max(1, layout_.ranks_per_node);
  local_ = rank_ - node_ * ranks_per_node_;
  hierarchical_ok_ = layout_.blocks && layout_.nodes > 1 && layout_.ranks_per_node > 1;

  // Every rank must see the same layout and threshold, or their collectives would differ
  // (and fail as a disagreement or a timeout): compare the minimum and maximum of each.
  const uint64_t mine[3] = {static_cast<uint64_t>(layout_.ranks_per_node),
                            static_cast<uint64_t>(layout_.nodes), options_.hierarchical_min_bytes};
  uint64_t values[6], reduced[6];
  for (int i = 0; i < 3; ++i) {
    values[i] = mine[i];
    values[3 + i] = ~mine[i];  // min of ~x is ~(max of x)
  }
  const std::string context = absl::StrCat(Who(), ": comparing the node layout of the ranks");
  MPI_Request request = MPI_REQUEST_NULL;
  {
    auto lock = process_->Lock();
    MPI_RETURN_IF_ERROR(
        MPI_Iallreduce(values, reduced, 6, MPI_UINT64_T, MPI_MIN, comm_, &request), context);
  }
  RETURN_IF_ERROR(WaitForSetUp(&request, deadline, context, "not every rank answered"));
  for (int i = 0; i < 3; ++i) {
    if (reduced[i] != ~reduced[3 + i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": the ranks disagree (this rank: ", layout_.Describe(),
          ", hierarchical from ", options_.hierarchical_min_bytes,
          " bytes); set STRATA_RANKS_PER_NODE and STRATA_MPI_HIERARCHICAL_MIN_BYTES alike for "
          "every rank (mpirun -x NAME)"));
    }
  }
  return absl::OkStatus();
}

Status State::WaitForSetUp(MPI_Request* request, Clock::time_point deadline,
                           const std::string& context, const std::string& missing) {
  Backoff backoff;
  while (true) {
    int done = 0;
    {
      auto lock = process_->Lock();
      MPI_RETURN_IF_ERROR(MPI_Test(request, &done, MPI_STATUS_IGNORE), context);
    }
    if (done) return absl::OkStatus();
    if (Clock::now() >= deadline) {
      g_process_failed = true;
      return absl::DeadlineExceededError(absl::StrCat(context, ": ", missing, " within ",
                                                      options_.timeout_s,
                                                      " s (zero.comm_timeout_s)"));
    }
    backoff.Pause();
  }
}

bool State::Hierarchical(const Job& job) const {
  if (!hierarchical_ok_) return false;
  const CollectiveCall& call = job.call;
  uint64_t bytes = static_cast<uint64_t>(call.count) * DTypeBytes(call.dtype);
  switch (call.op) {
    case CollectiveOp::kAllReduce:
      break;
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllGather:
      bytes *= static_cast<uint64_t>(size_);
      break;
    default:
      return false;
  }
  if (bytes == 0 || bytes < options_.hierarchical_min_bytes) return false;
  // Only where it sends fewer bytes across nodes than the flat path, by the formulas of
  // docs/multinode.md (the chained partial sums travel as fp32, 4 bytes per element):
  // all-reduce (n-1)c(4+b) against 2k(n-1)cb; reduce-scatter k(n-1)c(4n+b) against
  // nk*k(n-1)cb; all-gather always (k > 1).
  const uint64_t n = static_cast<uint64_t>(layout_.nodes);
  const uint64_t k = static_cast<uint64_t>(ranks_per_node_);
  const uint64_t b = DTypeBytes(call.dtype);
  switch (call.op) {
    case CollectiveOp::kAllReduce:
      return 4 + b < 2 * k * b;
    case CollectiveOp::kReduceScatter:
      return 4 * n + b < n * k * b;
    default:
      return true;
  }
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
  if (Hierarchical(job)) {
    hierarchical_collectives_.fetch_add(1);
    switch (job.call.op) {
      case CollectiveOp::kAllReduce:
        return HierarchicalAllReduce(job, deadline);
      case CollectiveOp::kReduceScatter:
        return HierarchicalReduceScatter(job, deadline);
      case CollectiveOp::kAllGather:
        return HierarchicalAllGather(job, deadline);
      default:
        break;
    }
  }
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
