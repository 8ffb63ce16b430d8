// mpi_collectives_check: the MPI communicator under mpirun, nccl-tests style. Every rank
// fills its buffers from (rank, step, index) and checks the exact bytes of every collective
// against the scalar rank-order reference (test_pattern.h): fp32 and bf16, counts that
// divide nothing (1, 7, 13, 1000003), in place and out of place, every broadcast root, with
// reductions forced through many segments. Rank 0 also runs the same reductions on a local
// (threads) group and checks that MPI and local give the same bits.
//
// Failure modes for the failure tests (--mode): rank --victim, at collective --at,
//   die:   kills itself (SIGKILL) - mpirun tears the job down; survivors report (SIGTERM).
//   hang:  stops issuing collectives but stays alive - survivors time out (--timeout_s)
//          with an error naming the operation and the rank, and exit non-zero.
//   abort: calls Abort(reason) - survivors fail at once naming the rank and the reason.
// Node layout (docs/multinode.md): with STRATA_RANKS_PER_NODE=k in the environment (mpirun
// -x), the ranks play nodes of k ranks; the check then also expects that layout from the
// communicator, and checks the bytes each rank sent within and across nodes in every
// collective against the formulas of docs/multinode.md (written here independently of the
// communicator), which also tells whether the hierarchical or the flat path ran.
// STRATA_MPI_HIERARCHICAL_MIN_BYTES sets the size from which the hierarchical path runs.
// --bench: rank 0 prints all-reduce times of 64 MiB fp32, this communicator against
//          MPI_Allreduce, in the same run.
// Exit status 0 when every check passed (mode check), 1 otherwise.
// Usage: mpirun -np N mpi_collectives_check [--mode=check|die|hang|abort] [--victim=R]
//        [--at=K] [--timeout_s=S] [--bench]
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/local_communicator.h"
#include "collectives/mpi_communicator.h"
#include "collectives/test_pattern.h"
#include "collectives/traffic_formulas.h"
#include "device/cpu_device.h"

namespace strata {
namespace {

namespace tp = testing_pattern;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string mode = "check";
  int victim = 1;
  int at = 3;
  double timeout_s = 60;
  bool bench = false;
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t length = std::strlen(name);
      return arg.compare(0, length, name) == 0 ? arg.c_str() + length : nullptr;
    };
    if (const char* v = value("--mode=")) {
      flags.mode = v;
    } else if (const char* v = value("--victim=")) {
      flags.victim = std::atoi(v);
    } else if (const char* v = value("--at=")) {
      flags.at = std::atoi(v);
    } else if (const char* v = value("--timeout_s=")) {
      flags.timeout_s = std::atof(v);
    } else if (arg == "--bench") {
      flags.bench = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument '", arg, "'"));
    }
  }
  if (flags.mode != "check" && flags.mode != "die" && flags.mode != "hang" &&
      flags.mode != "abort" && flags.mode != "stuck") {
    return absl::InvalidArgumentError(absl::StrCat("unknown --mode=", flags.mode));
  }
  return flags;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Bytes Filled(size_t count, DType dtype, int rank, uint64_t step) {
  Bytes bytes(count * DTypeBytes(dtype));
  tp::Fill(bytes.data(), count, dtype, rank, step);
  return bytes;
}

class Checker {
 public:
  Checker(Communicator& comm, Stream& stream)
      : comm_(comm), stream_(stream), rank_(comm.rank()), world_(comm.world_size()) {}

  int failures() const { return failures_; }
  int checks() const { return checks_; }
  // Time spent waiting for collectives (the rest is making and checking test data).
  double collective_seconds() const { return collective_seconds_; }

  // Every collective on (dtype, count), checked against the reference.
  void CheckAll(DType dtype, size_t count, uint64_t step) {
    const std::string what = absl::StrCat(DTypeName(dtype), " count ", count, " step ", step);
    const size_t element_bytes = DTypeBytes(dtype);

    Bytes data = Filled(count, dtype, rank_, step);
    Run("all_reduce " + what, comm_.AllReduce(data.data(), count, dtype, stream_));
    Expect("all_reduce " + what, data.data(),
           tp::Expected(CollectiveOp::kAllReduce, rank_, world_, count, dtype, step), dtype);
    if (rank_ == 0) CrossCheckWithLocal(dtype, count, step, data);

    for (bool in_place : {false, true}) {
      const std::string how = in_place ? " in place " : " out of place ";
      Bytes input = Filled(count * world_, dtype, rank_, step);
      Bytes output(count * element_bytes, 0xab);
      void* out = in_place ? input.data() + rank_ * count * element_bytes : output.data();
      Run("reduce_scatter" + how + what,
          comm_.ReduceScatter(input.data(), out, count, dtype, stream_));
      Expect("reduce_scatter" + how + what, out,
             tp::Expected(CollectiveOp::kReduceScatter, rank_, world_, count, dtype, step), dtype);

      Bytes mine = Filled(count, dtype, rank_, step);
      Bytes gathered(count * world_ * element_bytes, 0xcd);
      char* slot = reinterpret_cast<char*>(gathered.data()) + rank_ * count * element_bytes;
      if (in_place) std::memcpy(slot, mine.data(), mine.size());
      Run("all_gather" + how + what,
          comm_.AllGather(in_place ? slot : reinterpret_cast<char*>(mine.data()), gathered.data(),
                          count, dtype, stream_));
      Expect("all_gather" + how + what, gathered.data(),
             tp::Expected(CollectiveOp::kAllGather, rank_, world_, count, dtype, step), dtype);
    }

    const int root = static_cast<int>(step % world_);
    Bytes broadcast = Filled(count, dtype, rank_, rank_ == root ? step : step + 1000);
    Run("broadcast " + what, comm_.Broadcast(broadcast.data(), count, dtype, root, stream_));
    Expect("broadcast " + what, broadcast.data(),
           tp::Expected(CollectiveOp::kBroadcast, rank_, world_, count, dtype, step, root), dtype);

    Run("barrier " + what, comm_.Barrier(stream_));
  }

  // Every collective on (dtype, count), and what each rank sent within and across nodes
  // against the formulas (count must make them exact: a multiple of world * k).
  void CheckTraffic(DType dtype, size_t count, uint64_t step) {
    const ExpectedLayout layout = ReadExpectedLayout(world_);
    const size_t b = DTypeBytes(dtype);
    const NodeTraffic* traffic = comm_.node_traffic();
    ++checks_;
    if (traffic == nullptr) return Fail("the MPI communicator has no node_traffic()");
    const std::string what = absl::StrCat(DTypeName(dtype), " count ", count);
    auto measure = [&](CollectiveOp op, const std::string& name, const Status& issued,
                       const TrafficBytes& before, uint64_t hierarchical_before, int root) {
      Run(name + " " + what, issued);
      const TrafficBytes after = traffic->sent();
      const ExpectedTraffic expected = Formula(op, layout, rank_, count, b, root);
      const uint64_t within = after.within_node - before.within_node;
      const uint64_t across = after.across_nodes - before.across_nodes;
      const bool hierarchical = traffic->hierarchical_collectives() != hierarchical_before;
      ++checks_;
      if (within != expected.sent.within_node || across != expected.sent.across_nodes ||
          hierarchical != expected.hierarchical) {
        Fail(absl::StrCat(name, " ", what, ": sent ", within, " B within and ", across,
                          " B across nodes (", hierarchical ? "hierarchical" : "flat",
                          "), the formula says ", expected.sent.within_node, " and ",
                          expected.sent.across_nodes, " (",
                          expected.hierarchical ? "hierarchical" : "flat", ")"));
      }
      if (hierarchical) ++hierarchical_runs_;
    };
    Bytes data = Filled(count, dtype, rank_, step);
    TrafficBytes before = traffic->sent();
    uint64_t hierarchical = traffic->hierarchical_collectives();
    measure(CollectiveOp::kAllReduce, "all_reduce",
            comm_.AllReduce(data.data(), count, dtype, stream_), before, hierarchical, 0);
    Expect("all_reduce " + what, data.data(),
           tp::Expected(CollectiveOp::kAllReduce, rank_, world_, count, dtype, step), dtype);

    Bytes input = Filled(count * world_, dtype, rank_, step);
    Bytes output(count * b);
    before = traffic->sent();
    hierarchical = traffic->hierarchical_collectives();
    measure(CollectiveOp::kReduceScatter, "reduce_scatter",
            comm_.ReduceScatter(input.data(), output.data(), count, dtype, stream_), before,
            hierarchical, 0);
    Expect("reduce_scatter " + what, output.data(),
           tp::Expected(CollectiveOp::kReduceScatter, rank_, world_, count, dtype, step), dtype);

    Bytes mine = Filled(count, dtype, rank_, step);
    Bytes gathered(count * world_ * b);
    before = traffic->sent();
    hierarchical = traffic->hierarchical_collectives();
    measure(CollectiveOp::kAllGather, "all_gather",
            comm_.AllGather(mine.data(), gathered.data(), count, dtype, stream_), before,
            hierarchical, 0);
    Expect("all_gather " + what, gathered.data(),
           tp::Expected(CollectiveOp::kAllGather, rank_, world_, count, dtype, step), dtype);

    const int root = world_ - 1;
    Bytes broadcast = Filled(count, dtype, root, step);
    before = traffic->sent();
    hierarchical = traffic->hierarchical_collectives();
    measure(CollectiveOp::kBroadcast, "broadcast",
            comm_.Broadcast(broadcast.data(), count, dtype, root, stream_), before, hierarchical,
            root);
    before = traffic->sent();
    hierarchical = traffic->hierarchical_collectives();
    measure(CollectiveOp::kBarrier, "barrier", comm_.Barrier(stream_), before, hierarchical, 0);
  }

  int hierarchical_runs() const { return hierarchical_runs_; }

  // The process's place (one node here) and the option checks.
  void CheckSetUp() {
    StatusOr<MpiWorld> world = GetMpiWorld();
    ++checks_;
    if (!world.ok()) return Fail(world.status().ToString());
    if (world->rank != rank_ || world->size != world_ || world->local_rank != rank_ ||
        world->local_size != world_ || world->host.empty()) {
      Fail(absl::StrCat("GetMpiWorld: rank ", world->rank, " size ", world->size, " local rank ",
                        world->local_rank, " local size ", world->local_size, " host '",
                        world->host, "'"));
    }
    // The communicator's place on the node is MPI's (one machine here: every rank local).
    ++checks_;
    if (comm_.local_rank() != rank_ || comm_.local_size() != world_) {
      Fail(absl::StrCat("communicator: local rank ", comm_.local_rank(), " local size ",
                        comm_.local_size()));
    }
    // The node layout the collectives assume: the override's, else MPI's (one machine).
    const ExpectedLayout layout = ReadExpectedLayout(world_);
    const NodeTraffic* traffic = comm_.node_traffic();
    ++checks_;
    if (traffic == nullptr || traffic->nodes() != layout.nodes ||
        traffic->ranks_per_node() != layout.ranks_per_node ||
        traffic->node() != rank_ / layout.ranks_per_node) {
      Fail(absl::StrCat("node layout: expected node ", rank_ / layout.ranks_per_node, " of ",
                        layout.nodes, " x ", layout.ranks_per_node, ", got ",
                        traffic == nullptr ? std::string("no node_traffic()")
                                           : absl::StrCat("node ", traffic->node(), " of ",
                                                          traffic->nodes(), " x ",
                                                          traffic->ranks_per_node())));
    }
    MpiOptions bad;
    bad.timeout_s = 0;
    ++checks_;
    if (CreateMpiCommunicator(bad).status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("CreateMpiCommunicator accepted zero.comm_timeout_s = 0");
    }
  }

  // Two all-reduces of the same inputs give the same bytes.
  void CheckDeterminism(DType dtype, size_t count) {
    Bytes first = Filled(count, dtype, rank_, 77), second = first;
    Run("determinism 1", comm_.AllReduce(first.data(), count, dtype, stream_));
    Run("determinism 2", comm_.AllReduce(second.data(), count, dtype, stream_));
    ++checks_;
    if (first != second) Fail("two all-reduces of the same inputs differ");
  }

 private:
  void Run(const std::string& what, const Status& issued) {
    const auto start = Clock::now();
    Status status = issued.ok() ? stream_.Synchronize() : issued;
    collective_seconds_ += Seconds(start);
    if (!status.ok()) Fail(absl::StrCat(what, ": ", status.ToString()));
  }

  void Expect(const std::string& what, const void* got, const Bytes& expected, DType dtype) {
    ++checks_;
    const std::string difference = tp::Compare(got, expected, dtype);
    if (!difference.empty()) Fail(absl::StrCat(what, ": ", difference));
  }

  void Fail(const std::string& message) {
    ++failures_;
    std::fprintf(stderr, "rank %d: FAIL %s\n", rank_, message.c_str());
  }

  // The same all-reduce on a local group of world_ threads: the MPI result must be the same
  // bytes.
  void CrossCheckWithLocal(DType dtype, size_t count, uint64_t step, const Bytes& mpi_result) {
    auto device = CreateCpuDevice(CpuDeviceOptions{});
    auto group = CreateLocalGroup(world_, LocalGroupOptions{});
    if (!group.ok()) return Fail(group.status().ToString());
    std::vector<std::unique_ptr<Stream>> streams;
    std::vector<Bytes> data;
    for (int r = 0; r < world_; ++r) {
      streams.push_back(std::move(device->CreateStream("local").value()));
      data.push_back(Filled(count, dtype, r, step));
      Status issued = (*group)[r]->AllReduce(data[r].data(), count, dtype, *streams[r]);
      if (!issued.ok()) return Fail(issued.ToString());
    }
    for (auto& stream : streams) {
      Status status = stream->Synchronize();
      if (!status.ok()) return Fail(status.ToString());
    }
    ++checks_;
    if (data[0] != mpi_result) {
      Fail(absl::StrCat("MPI and local all_reduce differ (", DTypeName(dtype), " count ", count,
                        ")"));
    }
  }

  Communicator& comm_;
  Stream& stream_;
  const int rank_;
  const int world_;
  int failures_ = 0;
  int checks_ = 0;
  int hierarchical_runs_ = 0;
  double collective_seconds_ = 0;
};

int RunCheck(Communicator& comm, Stream& stream) {
  const auto start = Clock::now();
  Checker checker(comm, stream);
  checker.CheckSetUp();
  uint64_t step = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{13}, size_t{1000003}}) {
      checker.CheckAll(dtype, count, step++);
    }
    checker.CheckDeterminism(dtype, 1000003);
    // Counts that make the byte formulas exact: below and above the hierarchical threshold.
    const size_t unit = static_cast<size_t>(comm.world_size()) * comm.world_size();
    for (size_t count : {unit * 3, unit * 30011}) checker.CheckTraffic(dtype, count, step++);
  }
  std::printf(
      "rank %d of %d: %s, %d checks, %d failed, %d hierarchical, %.2f s (%.2f s in "
      "collectives)\n",
      comm.rank(), comm.world_size(), checker.failures() == 0 ? "PASS" : "FAIL", checker.checks(),
      checker.failures(), checker.hierarchical_runs(), Seconds(start),
      checker.collective_seconds());
  std::fflush(stdout);
  return checker.failures() == 0 ? 0 : 1;
}

// Collectives in a loop until one fails; rank `victim` misbehaves at collective `at`.
int RunFailure(Communicator& comm, Stream& stream, const Flags& flags) {
  const int rank = comm.rank();
  constexpr size_t kCount = 1000;
  for (int step = 0; step < 1000; ++step) {
    if (flags.mode == "stuck" && step == flags.at) {
      if (rank == flags.victim) {
        // Work on the collectives' stream that does not finish: the all-reduce below never
        // starts, and the victim's start watch fails it after --timeout_s, telling the peers.
        std::fprintf(stderr, "rank %d: victim (--mode=stuck) at all_reduce #%d\n", rank, step);
        stream.EnqueueHost([] {
          std::this_thread::sleep_for(std::chrono::seconds(60));
          return absl::OkStatus();
        });
      } else {
        // The peers arrive later, so the victim's watch fires before their own timeout.
        std::this_thread::sleep_for(std::chrono::duration<double>(flags.timeout_s * 0.7));
      }
    }
    if (rank == flags.victim && step == flags.at && flags.mode != "stuck") {
      std::fprintf(stderr, "rank %d: victim (--mode=%s) at all_reduce #%d\n", rank,
                   flags.mode.c_str(), step);
      if (flags.mode == "die") {
        ::raise(SIGKILL);
      } else if (flags.mode == "hang") {
        // Alive but silent: mpirun kills it once a survivor exits with an error.
        for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::seconds(1));
        return 1;
      } else {
        comm.Abort(absl::StrCat("simulated failure of rank ", rank, " at step ", step));
        // Leaves the survivors time to report before mpirun tears the job down.
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return 1;
      }
    }
    Bytes data = Filled(kCount, DType::kF32, rank, step);
    const auto start = Clock::now();
    Status status = comm.AllReduce(data.data(), kCount, DType::kF32, stream);
    if (status.ok()) status = stream.Synchronize();
    if (!status.ok()) {
      std::fprintf(stderr, "rank %d: collective failed after %.2f s: %s\n", rank, Seconds(start),
                   status.ToString().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "rank %d: no failure seen\n", rank);
  return 1;
}

// All-reduce of 64 MiB fp32 through this communicator and through MPI_Allreduce.
void RunBench(Communicator& comm, Stream& stream) {
  constexpr size_t kCount = 16u << 20;
  constexpr int kIterations = 5;
  Bytes data = Filled(kCount, DType::kF32, comm.rank(), 0);
  std::vector<float> reference(kCount);
  double ours = 0, theirs = 0;
  for (int i = 0; i <= kIterations; ++i) {
    auto start = Clock::now();
    if (!comm.AllReduce(data.data(), kCount, DType::kF32, stream).ok() ||
        !stream.Synchronize().ok()) {
      std::fprintf(stderr, "bench all_reduce failed\n");
      return;
    }
    if (i > 0) ours += Seconds(start);
    std::memcpy(reference.data(), data.data(), data.size());
    start = Clock::now();
    MPI_Allreduce(MPI_IN_PLACE, reference.data(), kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (i > 0) theirs += Seconds(start);
  }
  if (comm.rank() == 0) {
    const double gib = kCount * 4.0 / (1u << 30);
    std::printf(
        "all_reduce 64 MiB fp32, %d ranks: fixed-order %.1f ms (%.2f GiB/s), "
        "MPI_Allreduce %.1f ms (%.2f GiB/s), ratio %.2f\n",
        comm.world_size(), 1e3 * ours / kIterations, gib * kIterations / ours,
        1e3 * theirs / kIterations, gib * kIterations / theirs, ours / theirs);
  }
}

int Main(int argc, char** argv) {
  StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", flags.status().ToString().c_str());
    return 2;
  }
  InstallMpiTerminationReport();
  MpiOptions options;
  options.timeout_s = flags->timeout_s;
  // Checks use a small scratch, so reductions of 1000003 elements run through many
  // segments; the benchmark uses the default.
  if (!flags->bench) options.max_scratch_bytes = 256u << 10;
  StatusOr<std::unique_ptr<Communicator>> comm = CreateMpiCommunicator(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  auto device = CreateCpuDevice(CpuDeviceOptions{});
  StatusOr<std::unique_ptr<Stream>> stream = device->CreateStream("comm");
  if (!stream.ok()) {
    std::fprintf(stderr, "%s\n", stream.status().ToString().c_str());
    return 1;
  }
  if (flags->bench) {
    RunBench(**comm, **stream);
    return 0;
  }
  if (flags->mode == "check") return RunCheck(**comm, **stream);
  return RunFailure(**comm, **stream, *flags);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
