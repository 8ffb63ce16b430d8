// NCCL Communicator: non-blocking NCCL calls awaited against a deadline, fixed-order
// reductions (grouped send/recv to the owner + a rank-order sum kernel), and a watchdog
// thread that aborts the communicator when a collective runs past the timeout. See
// nccl_communicator.h.
//
// Locks: issue_mutex_ serializes issuing (the bound stream, the scratch buffer); mutex_
// guards every use of comm_ (NCCL calls, abort, destroy); watch_mutex_ guards the queue of
// collectives in flight. Order: issue_mutex_, then mutex_, then watch_mutex_; the watchdog
// never holds watch_mutex_ while it takes mutex_. Host functions enqueued on the stream read only
// the shared Outcome (no locks, no CUDA: CUDA forbids CUDA calls there, and a lock there could wait
// on an abort that waits on the stream).
//
// The raw NCCL side (results as Status, awaiting a non-blocking comm, creating one through
// the bootstrap Communicator) is in nccl_comm.{h,cc}.
#include "collectives/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/nccl_comm.h"
#include "collectives/nccl_reduce.h"
#include "device/cuda/cuda_native.h"
#include "device/cuda/cuda_status.h"
#include "core/logging.h"

namespace strata {
namespace {

using nccl_internal::Nccl;
using nccl_internal::AwaitComm;
using nccl_internal::Clock;
using nccl_internal::LogIfError;
using nccl_internal::NcclStatus;
using nccl_internal::NcclType;

constexpr uint64_t kNoSequence = ~0ull;
constexpr size_t kMinScratchBytes = 4096;

// Failure shared with the host functions that report it on the stream: written once,
// then published by `failed`.
struct Outcome {
  std::atomic<bool> failed{false};
  Status failure;
  uint64_t failure_sequence = kNoSequence;

  // OK for a collective issued before the failing one; else the failure.
  Status For(const CollectiveCall& call) const {
    if (!failed.load(std::memory_order_acquire)) return absl::OkStatus();
    if (call.sequence < failure_sequence && failure_sequence != kNoSequence) {
      return absl::OkStatus();
    }
    if (call.sequence == failure_sequence) return failure;
    return Status(failure.code(), absl::StrCat(DescribeCall(call),
                                               " not run: the communicator "
                                               "failed: ",
                                               failure.message()));
  }
};

// One collective in flight, followed by the watchdog.
struct InFlight {
  CollectiveCall call;
  cudaEvent_t start = nullptr;  // recorded just before the collective's first operation
  cudaEvent_t end = nullptr;    // recorded just after its last
  bool started = false;
  Clock::time_point started_at;
  Clock::time_point waiting_since;  // issue, or the previous collective's end if later
  std::string stream;               // the strata stream it was issued on
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Device& device, int device_id, int rank, int size, const NcclOptions& options,
                   ncclComm_t comm)
      : device_(device),
        device_id_(device_id),
        rank_(rank),
        size_(size),
        options_(options),
        comm_(comm),
        outcome_(std::make_shared<Outcome>()),
        watchdog_([this] { Watch(); }) {}

  // Its place on the node: the bootstrap's.
  void SetNode(int local_rank, int local_size) {
    local_rank_ = local_rank;
    local_size_ = local_size;
  }

  ~NcclCommunicator() override {
    bool drained;
    {
      std::unique_lock<std::mutex> lock(watch_mutex_);
      drained = drained_cv_.wait_for(lock, Seconds(options_.timeout_s),
                                     [&] { return in_flight_.empty(); });
      stopping_ = true;
      watch_cv_.notify_all();
    }
    watchdog_.join();
    LogIfError(CUDA_STATUS(cudaSetDevice(device_id_), Who("closing")));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (comm_ != nullptr) {  // null after a failure: Fail aborted it
        Status closed =
            drained ? absl::OkStatus()
                    : absl::DeadlineExceededError(Who(absl::StrCat(
                          "collectives still running ", options_.timeout_s,
                          " s (zero.comm_timeout_s) after the communicator was destroyed")));
        if (closed.ok()) closed = NCCL_STATUS(Nccl().CommFinalize(comm_), Who("finalizing"));
        if (closed.ok()) {
          closed = AwaitComm(comm_, Clock::now() + Seconds(options_.timeout_s), Who("finalizing"),
                             options_.timeout_s);
        }
        if (closed.ok()) {
          LogIfError(NCCL_STATUS(Nccl().CommDestroy(comm_), Who("destroying")));
        } else {
          LogIfError(closed);
          LogIfError(NCCL_STATUS(Nccl().CommAbort(comm_), Who("aborting")));
        }
        comm_ = nullptr;
      }
    }
    for (InFlight& flight : in_flight_) DestroyEvents(flight);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  Status AllReduce(void* data, size_t count, DType dtype, Stream& stream) override {
    CollectiveCall request = Next(CollectiveOp::kAllReduce, dtype, count);
    RETURN_IF_ERROR(CheckAllReduce(data, request));
    const size_t element_bytes = DTypeBytes(dtype);
    const size_t n = static_cast<size_t>(size_);
    const size_t chunk_cap = std::max<size_t>(1, options_.max_scratch_bytes / (n * element_bytes));
    const size_t chunk = std::min(chunk_cap, (count + n - 1) / n);
    const size_t scratch_bytes = options_.fixed_order && size_ > 1 ? n * chunk * element_bytes : 0;
    return Issue(request, stream, scratch_bytes,
                 [=](const CollectiveCall& call, cudaStream_t cuda_stream, char* scratch) {
                   if (!options_.fixed_order) {
                     NCCL_RETURN_IF_ERROR(Nccl().AllReduce(data, data, count, NcclType(dtype), ncclSum,
                                                        comm_, cuda_stream),
                                          Who(DescribeCall(call)));
                     return Await(call);
                   }
                   return FixedAllReduce(static_cast<char*>(data), call, chunk_cap * n, cuda_stream,
                                         scratch);
                 });
  }

  Status ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                       Stream& stream) override {
    CollectiveCall request = Next(CollectiveOp::kReduceScatter, dtype, count);
    RETURN_IF_ERROR(CheckReduceScatter(input, output, request, rank_, size_));
    const size_t element_bytes = DTypeBytes(dtype);
    const size_t n = static_cast<size_t>(size_);
    const size_t segment_cap =
        std::max<size_t>(1, options_.max_scratch_bytes / (n * element_bytes));
    const size_t scratch_bytes =
        options_.fixed_order && size_ > 1 ? n * std::min(segment_cap, count) * element_bytes : 0;
    return Issue(request, stream, scratch_bytes,
                 [=](const CollectiveCall& call, cudaStream_t cuda_stream, char* scratch) {
                   if (!options_.fixed_order) {
                     NCCL_RETURN_IF_ERROR(Nccl().ReduceScatter(input, output, count, NcclType(dtype),
                                                            ncclSum, comm_, cuda_stream),
                                          Who(DescribeCall(call)));
                     return Await(call);
                   }
                   return FixedReduceScatter(static_cast<const char*>(input),
                                             static_cast<char*>(output), call, segment_cap,
                                             cuda_stream, scratch);
                 });
  }

  Status AllGather(const void* input, void* output, size_t count, DType dtype,
                   Stream& stream) override {
    CollectiveCall request = Next(CollectiveOp::kAllGather, dtype, count);
    RETURN_IF_ERROR(CheckAllGather(input, output, request, rank_, size_));
    return Issue(request, stream, 0,
                 [=](const CollectiveCall& call, cudaStream_t cuda_stream, char*) {
                   // NCCL's in-place all-gather is exactly input == output + rank * count.
                   NCCL_RETURN_IF_ERROR(
                       Nccl().AllGather(input, output, count, NcclType(dtype), comm_, cuda_stream),
                       Who(DescribeCall(call)));
                   return Await(call);
                 });
  }

  Status Broadcast(void* data, size_t count, DType dtype, int root, Stream& stream) override {
    CollectiveCall request = Next(CollectiveOp::kBroadcast, dtype, count);
    request.root = root;
    RETURN_IF_ERROR(CheckBroadcast(data, request, size_));
    return Issue(request, stream, 0,
                 [=](const CollectiveCall& call, cudaStream_t cuda_stream, char*) {
                   NCCL_RETURN_IF_ERROR(
                       Nccl().Broadcast(data, data, count, NcclType(dtype), root, comm_, cuda_stream),
                       Who(DescribeCall(call)));
                   return Await(call);
                 });
  }

  Status Barrier(Stream& stream) override {
    CollectiveCall request = Next(CollectiveOp::kBarrier, DType::kF32, 0);
    // A one-element all-reduce on the scratch buffer completes only once every rank joined.
    return Issue(request, stream, sizeof(float),
                 [=](const CollectiveCall& call, cudaStream_t cuda_stream, char* scratch) {
                   NCCL_RETURN_IF_ERROR(
                       Nccl().AllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm_, cuda_stream),
                       Who(DescribeCall(call)));
                   return Await(call);
                 });
  }

  void Abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Fail(absl::AbortedError(Who(absl::StrCat("aborted the group: ", reason))), kNoSequence);
  }

  std::string Describe() const override {
    return absl::StrCat("NCCL rank ", rank_, " of ", size_, " on GPU ", device_id_);
  }

 private:
  static Clock::duration Seconds(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  std::string Who(const std::string& what) const {
    return absl::StrCat("NCCL rank ", rank_, " of ", size_, " (GPU ", device_id_, "): ", what);
  }

  CollectiveCall Next(CollectiveOp op, DType dtype, size_t count) const {
    CollectiveCall call;
    call.op = op;
    call.dtype = dtype;
    call.count = count;
    call.sequence = issued_.load();
    return call;
  }

  // Awaits the non-blocking communicator after a call of `call`. Caller holds mutex_.
  Status Await(const CollectiveCall& call) {
    return AwaitComm(comm_, Clock::now() + Seconds(options_.timeout_s),
                     Who(absl::StrCat("enqueueing ", DescribeCall(call))), options_.timeout_s);
  }

  // Records the first failure and aborts the NCCL communicator, which ends its kernels so
  // the stream moves on. Caller holds mutex_.
  void Fail(const Status& status, uint64_t sequence) {
    if (outcome_->failed.load()) return;
    outcome_->failure = status;
    outcome_->failure_sequence = sequence;
    outcome_->failed.store(true, std::memory_order_release);
    spdlog::error("{}", status.ToString());
    if (comm_ != nullptr) {
      LogIfError(NCCL_STATUS(Nccl().CommAbort(comm_), Who("aborting after the failure above")));
      comm_ = nullptr;
    }
  }

  // Grows the scratch buffer to `bytes` (at least doubling). Caller holds issue_mutex_ but
  // not mutex_: freeing the old buffer synchronizes the device, which must stay abortable.
  Status EnsureScratch(size_t bytes) {
    bytes = std::max(bytes, kMinScratchBytes);
    if (scratch_.bytes() >= bytes && !scratch_.empty()) return absl::OkStatus();
    const size_t grown = std::min(std::max(bytes, 2 * scratch_.bytes()),
                                  std::max(options_.max_scratch_bytes, bytes));
    ASSIGN_OR_RETURN(Buffer buffer, device_.Allocate(Tier::kDevice, StateKind::kWorkspace, grown,
                                                     "NCCL fixed-order reduction scratch"));
    scratch_ = std::move(buffer);  // frees the old one after the work queued on it
    return absl::OkStatus();
  }

  // Enqueues the NCCL operations of `call` (its final sequence number) on the stream.
  using Enqueue = std::function<Status(const CollectiveCall& call, cudaStream_t, char* scratch)>;

  // Enqueues one collective: events around it for the watchdog, then host work that turns
  // a failure into the stream's sticky error.
  Status Issue(CollectiveCall call, Stream& stream, size_t scratch_bytes, const Enqueue& enqueue) {
    ASSIGN_OR_RETURN(cudaStream_t cuda_stream, NativeStream(stream));
    std::lock_guard<std::mutex> issue_lock(issue_mutex_);
    if (bound_stream_ == nullptr) bound_stream_ = cuda_stream;
    if (bound_stream_ != cuda_stream) {
      return absl::InvalidArgumentError(
          Who(absl::StrCat(DescribeCall(call), " issued on stream '", stream.name(),
                           "', but this communicator's collectives go to one stream (its first)")));
    }
    call.sequence = issued_.fetch_add(1);
    StreamLabel label(stream, CollectiveName(call.op), "comm",
                      {{"bytes", std::to_string(call.count * DTypeBytes(call.dtype))},
                       {"sequence", std::to_string(call.sequence)}});
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_), Who("selecting the GPU"));
    Status scratch = outcome_->failed.load() ? absl::OkStatus() : EnsureScratch(scratch_bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!scratch.ok()) Fail(scratch, call.sequence);
      const bool empty = call.count == 0 && call.op != CollectiveOp::kBarrier;
      if (!outcome_->failed.load() && !empty) {
        InFlight flight;
        flight.call = call;
        flight.waiting_since = Clock::now();
        flight.stream = stream.name();
        Status status = CreateEvents(flight);
        if (status.ok()) {
          status = CUDA_STATUS(cudaEventRecord(flight.start, cuda_stream), Who("recording"));
        }
        if (status.ok()) status = enqueue(call, cuda_stream, scratch_.as<char>());
        if (status.ok()) {
          status = CUDA_STATUS(cudaEventRecord(flight.end, cuda_stream), Who("recording"));
        }
        if (status.ok()) {
          std::lock_guard<std::mutex> watch_lock(watch_mutex_);
          in_flight_.push_back(flight);
          watch_cv_.notify_all();
        } else {
          DestroyEvents(flight);
          Fail(status, call.sequence);
        }
      }
    }
    std::shared_ptr<const Outcome> outcome = outcome_;
    stream.EnqueueHost([outcome, call] { return outcome->For(call); });
    return absl::OkStatus();
  }

  Status CreateEvents(InFlight& flight) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&flight.start, cudaEventDisableTiming),
                         Who("creating an event"));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&flight.end, cudaEventDisableTiming),
                         Who("creating an event"));
    return absl::OkStatus();
  }

  void DestroyEvents(InFlight& flight) {
    if (flight.start != nullptr) cudaEventDestroy(flight.start);
    if (flight.end != nullptr) cudaEventDestroy(flight.end);
    flight.start = flight.end = nullptr;
  }

  // All-reduce in segments of at most segment_cap elements: each segment's N near-equal
  // chunks go to their owners (grouped send/recv into scratch slots), the owner sums the N
  // slots in rank order into its chunk, and sends the chunk to every rank. Caller holds
  // mutex_.
  Status FixedAllReduce(char* data, const CollectiveCall& call, size_t segment_cap,
                        cudaStream_t stream, char* scratch) {
    if (size_ == 1) return absl::OkStatus();
    const size_t e = DTypeBytes(call.dtype);
    const size_t n = static_cast<size_t>(size_);
    const ncclDataType_t type = NcclType(call.dtype);
    const std::string context = Who(DescribeCall(call));
    for (size_t begin = 0; begin < call.count; begin += segment_cap) {
      const size_t length = std::min(segment_cap, call.count - begin);
      const size_t chunk = (length + n - 1) / n;
      auto chunk_begin = [&](size_t j) { return begin + std::min(length, j * chunk); };
      auto chunk_length = [&](size_t j) {
        return std::min(length, (j + 1) * chunk) - std::min(length, j * chunk);
      };
      const size_t mine = chunk_length(rank_);
      char* my_chunk = data + chunk_begin(rank_) * e;

      NCCL_RETURN_IF_ERROR(Nccl().GroupStart(), context);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        const size_t theirs = chunk_length(peer);
        if (theirs > 0) {
          NCCL_RETURN_IF_ERROR(
              Nccl().Send(data + chunk_begin(peer) * e, theirs, type, peer, comm_, stream), context);
        }
        if (mine > 0) {
          NCCL_RETURN_IF_ERROR(
              Nccl().Recv(scratch + peer * chunk * e, mine, type, peer, comm_, stream), context);
        }
      }
      NCCL_RETURN_IF_ERROR(Nccl().GroupEnd(), context);
      RETURN_IF_ERROR(Await(call));
      if (mine > 0) {
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scratch + rank_ * chunk * e, my_chunk, mine * e,
                                             cudaMemcpyDeviceToDevice, stream),
                             context);
        RETURN_IF_ERROR(
            SumSlotsInRankOrderAsync(scratch, chunk, size_, my_chunk, mine, call.dtype, stream));
      }

      NCCL_RETURN_IF_ERROR(Nccl().GroupStart(), context);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        if (mine > 0) {
          NCCL_RETURN_IF_ERROR(Nccl().Send(my_chunk, mine, type, peer, comm_, stream), context);
        }
        const size_t theirs = chunk_length(peer);
        if (theirs > 0) {
          NCCL_RETURN_IF_ERROR(
              Nccl().Recv(data + chunk_begin(peer) * e, theirs, type, peer, comm_, stream), context);
        }
      }
      NCCL_RETURN_IF_ERROR(Nccl().GroupEnd(), context);
      RETURN_IF_ERROR(Await(call));
    }
    return absl::OkStatus();
  }

  // Reduce-scatter in segments of at most segment_cap elements per rank: chunk j of every
  // rank's input goes to rank j's scratch slot, then the N slots are summed in rank order.
  // Caller holds mutex_.
  Status FixedReduceScatter(const char* input, char* output, const CollectiveCall& call,
                            size_t segment_cap, cudaStream_t stream, char* scratch) {
    const size_t e = DTypeBytes(call.dtype);
    const size_t count = call.count;
    const std::string context = Who(DescribeCall(call));
    if (size_ == 1) {
      if (output != input) {
        CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(output, input, count * e, cudaMemcpyDeviceToDevice, stream), context);
      }
      return absl::OkStatus();
    }
    const ncclDataType_t type = NcclType(call.dtype);
    for (size_t begin = 0; begin < count; begin += segment_cap) {
      const size_t length = std::min(segment_cap, count - begin);
      NCCL_RETURN_IF_ERROR(Nccl().GroupStart(), context);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        NCCL_RETURN_IF_ERROR(
            Nccl().Send(input + (peer * count + begin) * e, length, type, peer, comm_, stream),
            context);
        NCCL_RETURN_IF_ERROR(
            Nccl().Recv(scratch + peer * length * e, length, type, peer, comm_, stream), context);
      }
      NCCL_RETURN_IF_ERROR(Nccl().GroupEnd(), context);
      RETURN_IF_ERROR(Await(call));
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(scratch + rank_ * length * e, input + (rank_ * count + begin) * e,
                          length * e, cudaMemcpyDeviceToDevice, stream),
          context);
      RETURN_IF_ERROR(SumSlotsInRankOrderAsync(scratch, length, size_, output + begin * e, length,
                                               call.dtype, stream));
    }
    return absl::OkStatus();
  }

  // The watchdog: follows the oldest collective in flight; fails the communicator when it
  // has run longer than the timeout on the GPU, or NCCL reports an asynchronous error.
  void Watch() {
    LogIfError(CUDA_STATUS(cudaSetDevice(device_id_), Who("starting the watchdog")));
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stopping_) {
      if (in_flight_.empty()) {
        drained_cv_.notify_all();
        watch_cv_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
        continue;
      }
      InFlight& oldest = in_flight_.front();
      const cudaError_t ended = cudaEventQuery(oldest.end);
      if (ended == cudaSuccess || outcome_->failed.load()) {
        // Done, or the communicator was aborted (its kernels end; nothing to watch).
        DestroyEvents(oldest);
        in_flight_.pop_front();
        // The next one waited behind this one until now: only time after counts.
        if (!in_flight_.empty()) {
          in_flight_.front().waiting_since =
              std::max(in_flight_.front().waiting_since, Clock::now());
        }
        continue;
      }
      Status problem;
      if (ended != cudaErrorNotReady) {
        problem = CudaStatus(ended, "cudaEventQuery(end)", __FILE__, __LINE__,
                             Who(absl::StrCat("waiting for ", DescribeCall(oldest.call))));
      }
      if (!oldest.started && cudaEventQuery(oldest.start) == cudaSuccess) {
        oldest.started = true;
        oldest.started_at = Clock::now();
      }
      if (problem.ok() && oldest.started &&
          Clock::now() - oldest.started_at > Seconds(options_.timeout_s)) {
        problem = absl::DeadlineExceededError(Who(absl::StrCat(
            DescribeCall(oldest.call), " did not complete within ", options_.timeout_s,
            " s (zero.comm_timeout_s) of starting on the GPU; the NCCL communicator was "
            "aborted. NCCL cannot tell which rank is missing: one died, hangs, or stopped "
            "issuing collectives (see the other ranks' errors)")));
      }
      if (problem.ok() && !oldest.started &&
          Clock::now() - oldest.waiting_since > Seconds(options_.timeout_s)) {
        problem = absl::DeadlineExceededError(Who(absl::StrCat(
            DescribeCall(oldest.call), " issued on stream '", oldest.stream,
            "' did not start within ", options_.timeout_s,
            " s (zero.comm_timeout_s): the work queued before it on that stream has not "
            "finished (a kernel or host task that hangs, or a wait for an event that is never "
            "recorded); the NCCL communicator was aborted")));
      }
      const CollectiveCall call = oldest.call;
      lock.unlock();
      {
        std::lock_guard<std::mutex> comm_lock(mutex_);
        if (problem.ok() && comm_ != nullptr) {
          ncclResult_t async_error = ncclSuccess;
          if (Nccl().CommGetAsyncError(comm_, &async_error) == ncclSuccess &&
              async_error != ncclSuccess && async_error != ncclInProgress) {
            problem = NcclStatus(async_error, "ncclCommGetAsyncError (asynchronous error)",
                                 __FILE__, __LINE__, Who(DescribeCall(call)));
          }
        }
        if (!problem.ok()) Fail(problem, call.sequence);
      }
      lock.lock();
      if (problem.ok()) watch_cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

  Device& device_;
  const int device_id_;
  const int rank_;
  const int size_;
  int local_rank_ = 0;  // SetNode, before any use
  int local_size_ = 1;
  const NcclOptions options_;

  std::mutex issue_mutex_;
  cudaStream_t bound_stream_ = nullptr;
  Buffer scratch_;
  std::atomic<uint64_t> issued_{0};

  std::mutex mutex_;
  ncclComm_t comm_;  // null once aborted or destroyed
  std::shared_ptr<Outcome> outcome_;

  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::condition_variable drained_cv_;
  std::deque<InFlight> in_flight_;
  bool stopping_ = false;
  std::thread watchdog_;  // last: starts after everything above exists
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Device& device,
                                                               Communicator& bootstrap,
                                                               const NcclOptions& options) {
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero.comm_timeout_s must be a positive number of seconds, got ", options.timeout_s));
  }
  if (options.max_scratch_bytes < kMinScratchBytes) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL max_scratch_bytes must be at least ",
                                                   kMinScratchBytes, ", got ",
                                                   options.max_scratch_bytes));
  }
  ASSIGN_OR_RETURN(const int device_id, NativeDeviceId(device));
  const int rank = bootstrap.rank();
  const int size = bootstrap.world_size();
  const std::string who = absl::StrCat("NCCL rank ", rank, " of ", size, " (GPU ", device_id, ")");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id), absl::StrCat(who, ": selecting the GPU"));

  ASSIGN_OR_RETURN(ncclComm_t comm,
                   nccl_internal::CreateNcclComm(bootstrap, who, options.timeout_s));
  auto communicator = std::make_unique<NcclCommunicator>(device, device_id, rank, size, options,
                                                         comm);
  communicator->SetNode(bootstrap.local_rank(), bootstrap.local_size());
  return std::unique_ptr<Communicator>(std::move(communicator));
}

bool BuiltWithNccl() { return true; }

}  // namespace strata
