// Local (threads of one process) Communicator over a shared rendezvous hub. See
// local_communicator.h. A round is one collective (one sequence number); ranks arrive,
// compute their share once all have arrived, then leave once all have finished. Rounds live
// in a map keyed by sequence number because a fast rank may arrive at round s+1 while a slow
// one is still leaving round s.
#include "collectives/local_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_join.h"
#include "collectives/reduce.h"
#include "collectives/start_watch.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// One rank's buffers for one collective. AllReduce and Broadcast use `output` only.
struct Arrival {
  CollectiveCall call;
  const void* input = nullptr;
  void* output = nullptr;
};

class Hub {
 public:
  Hub(int world_size, const LocalGroupOptions& options)
      : world_size_(world_size), options_(options) {}

  // Runs `call` for `rank`: rendezvous, this rank's share of the work, departure.
  Status Run(int rank, const Arrival& arrival) {
    const CollectiveCall& call = arrival.call;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!failure_.ok()) return Failed(rank, call);
    Round& round = rounds_[call.sequence];
    if (round.arrivals.empty()) {
      round.arrivals.resize(world_size_);
      round.present.assign(world_size_, false);
    }
    for (int other = 0; other < world_size_; ++other) {
      if (!round.present[other]) continue;
      if (!SameCollective(round.arrivals[other].call, call)) {
        Fail(absl::InvalidArgumentError(
                 absl::StrCat("ranks disagree on collective #", call.sequence, ": rank ", other,
                              " issued ", DescribeCall(round.arrivals[other].call), ", rank ", rank,
                              " issued ", DescribeCall(call))),
             call.sequence);
        return Failed(rank, call);
      }
      break;  // every present arrival already matched the first one
    }
    round.arrivals[rank] = arrival;
    round.present[rank] = true;
    ++round.arrived;
    cv_.notify_all();

    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.timeout_s));
    while (round.arrived < world_size_ && failure_.ok()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
          round.arrived < world_size_ && failure_.ok()) {
        Fail(absl::DeadlineExceededError(absl::StrCat(
                 DescribeCall(call), " timed out after ", options_.timeout_s, " s: rank(s) ",
                 absl::StrJoin(Ranks(round, false), ", "),
                 " did not arrive (arrived: ", absl::StrJoin(Ranks(round, true), ", "), ")")),
             call.sequence);
      }
    }
    if (round.arrived < world_size_) {
      // The group failed while this rank waited. Nobody computes this round, so its
      // buffers are free as soon as it leaves.
      Leave(call.sequence, round);
      return Failed(rank, call);
    }

    // Everyone arrived: the arrivals are fixed from here on, so the work reads them unlocked.
    lock.unlock();
    Compute(rank, round.arrivals);
    lock.lock();
    ++round.finished;
    cv_.notify_all();
    // Never abandoned on failure: other ranks may still be reading or writing this rank's
    // buffers, and their work is bounded (copies and sums, no waiting).
    cv_.wait(lock, [&] { return round.finished == world_size_; });
    Leave(call.sequence, round);
    return absl::OkStatus();
  }

  void Abort(int rank, const std::string& reason) {
    FailGroup(absl::AbortedError(absl::StrCat("local group aborted by rank ", rank, ": ", reason)));
  }

  // Fails the group with `status` (the first failure is kept): every waiting and later
  // collective of every rank fails with it.
  void FailGroup(const Status& status) { FailCall(status, kNoSequence); }
  // The same, caused by this rank's collective of `sequence`.
  void FailCall(const Status& status, uint64_t sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    Fail(status, sequence);
  }

  int world_size() const { return world_size_; }

 private:
  static constexpr uint64_t kNoSequence = ~0ull;

  struct Round {
    std::vector<Arrival> arrivals;
    std::vector<bool> present;
    int arrived = 0;
    int finished = 0;
    int left = 0;
  };

  // Keeps the first failure; wakes every waiting rank. Caller holds mutex_.
  void Fail(Status status, uint64_t sequence) {
    if (!failure_.ok()) return;
    failure_ = std::move(status);
    failure_sequence_ = sequence;
    cv_.notify_all();
  }

  // The error of `call` on `rank` once the group failed. Caller holds mutex_.
  Status Failed(int rank, const CollectiveCall& call) const {
    if (call.sequence == failure_sequence_) {
      return Status(failure_.code(), absl::StrCat("local rank ", rank, ": ", failure_.message()));
    }
    return Status(failure_.code(),
                  absl::StrCat("local rank ", rank, ": ", DescribeCall(call),
                               " not run: the group failed: ", failure_.message()));
  }

  std::vector<int> Ranks(const Round& round, bool present) const {
    std::vector<int> ranks;
    for (int r = 0; r < world_size_; ++r) {
      if (round.present[r] == present) ranks.push_back(r);
    }
    return ranks;
  }

  // Caller holds mutex_. The last rank out erases the round.
  void Leave(uint64_t sequence, Round& round) {
    if (++round.left == round.arrived && round.arrived == world_size_) rounds_.erase(sequence);
  }

  // This rank's share of a collective whose ranks have all arrived.
  void Compute(int rank, const std::vector<Arrival>& arrivals) const {
    const CollectiveCall& call = arrivals[rank].call;
    const size_t element_bytes = DTypeBytes(call.dtype);
    const size_t count = call.count;
    const int n = world_size_;
    auto at = [element_bytes](const void* base, size_t elements) {
      return static_cast<const char*>(base) + elements * element_bytes;
    };
    switch (call.op) {
      case CollectiveOp::kAllReduce: {
        // Rank r reduces chunk r of every rank's buffer and writes it back to every rank.
        const size_t chunk = (count + n - 1) / n;
        const size_t begin = std::min(count, rank * chunk);
        const size_t end = std::min(count, begin + chunk);
        if (begin == end) return;
        std::vector<const void*> sources(n);
        std::vector<void*> outputs(n);
        for (int j = 0; j < n; ++j) {
          sources[j] = at(arrivals[j].output, begin);
          outputs[j] = const_cast<char*>(at(arrivals[j].output, begin));
        }
        SumInRankOrder(sources.data(), n, outputs.data(), n, end - begin, call.dtype);
        return;
      }
      case CollectiveOp::kReduceScatter: {
        // Only rank r reads chunk r of the inputs, so an in-place output cannot race.
        std::vector<const void*> sources(n);
        for (int j = 0; j < n; ++j) sources[j] = at(arrivals[j].input, rank * count);
        void* output = arrivals[rank].output;
        SumInRankOrder(sources.data(), n, &output, 1, count, call.dtype);
        return;
      }
      case CollectiveOp::kAllGather: {
        // Rank r writes only its own output; other ranks' inputs are only read.
        char* output = static_cast<char*>(arrivals[rank].output);
        for (int j = 0; j < n; ++j) {
          char* slot = output + j * count * element_bytes;
          if (slot != arrivals[j].input && count > 0) {
            std::memcpy(slot, arrivals[j].input, count * element_bytes);
          }
        }
        return;
      }
      case CollectiveOp::kBroadcast: {
        const void* source = arrivals[call.root].output;
        void* target = arrivals[rank].output;
        if (target != source && count > 0) std::memcpy(target, source, count * element_bytes);
        return;
      }
      case CollectiveOp::kBarrier:
        return;
    }
  }

  const int world_size_;
  const LocalGroupOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<uint64_t, Round> rounds_;
  Status failure_;
  uint64_t failure_sequence_ = kNoSequence;
};

// What enqueued work needs, shared so that it outlives the Communicator if need be.
struct RankState {
  std::shared_ptr<Hub> hub;
  int rank = 0;
  std::atomic<uint64_t> next_to_run{0};
  std::unique_ptr<StartWatch> watch;  // fails the group when a collective never starts
};

class LocalCommunicator : public CheckedCommunicator {
 public:
  explicit LocalCommunicator(std::shared_ptr<RankState> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank; }
  int world_size() const override { return state_->hub->world_size(); }

  void Abort(const std::string& reason) override { state_->hub->Abort(rank(), reason); }

  std::string Describe() const override {
    return absl::StrCat("local rank ", rank(), " of ", world_size());
  }

 private:
  Status Issue(const CollectiveCall& call, const void* input, void* output,
               Stream& stream) override {
    const Arrival arrival{call, input, output};
    std::shared_ptr<RankState> state = state_;
    state->watch->Issued(call, stream.name());
    stream.EnqueueHost([state, arrival]() -> Status {
      state->watch->Started(arrival.call.sequence);
      Status status = Run(*state, arrival);
      state->watch->Finished();
      return status;
    });
    return absl::OkStatus();
  }

  // Runs one collective on the stream's worker, after checking it runs in issue order.
  static Status Run(RankState& state, const Arrival& arrival) {
    // Sequence numbers are taken in issue order; running in another order means the
    // collectives went to several unordered streams, which would pair the wrong rounds.
    const uint64_t expected = state.next_to_run.fetch_add(1);
    if (expected != arrival.call.sequence) {
      Status status = absl::FailedPreconditionError(
          absl::StrCat("local rank ", state.rank, ": ", DescribeCall(arrival.call), " ran before #",
                       expected, "; issue every collective of a communicator on one stream"));
      state.hub->FailGroup(status);
      return status;
    }
    return state.hub->Run(state.rank, arrival);
  }

  std::shared_ptr<RankState> state_;
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateLocalGroup(
    int world_size, const LocalGroupOptions& options) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a local group needs at least 1 rank, got world size ", world_size));
  }
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero.comm_timeout_s must be a positive number of seconds, got ", options.timeout_s));
  }
  auto hub = std::make_shared<Hub>(world_size, options);
  std::vector<std::unique_ptr<Communicator>> group;
  for (int rank = 0; rank < world_size; ++rank) {
    auto state = std::make_shared<RankState>();
    state->hub = hub;
    state->rank = rank;
    state->watch = std::make_unique<StartWatch>(
        absl::StrCat("local rank ", rank, " of ", world_size), options.timeout_s,
        [hub](const Status& status, uint64_t sequence) { hub->FailCall(status, sequence); });
    group.push_back(std::make_unique<LocalCommunicator>(std::move(state)));
  }
  return group;
}

}  // namespace strata
