// mpi_layouts_bench: one unit's collectives per ZeRO step, flat against hierarchical against
// hybrid sharding, by bytes (measured by the communicator's counters and checked against
// the formulas of docs/multinode.md, exactly) and by time. Run it under mpirun with the
// ranks on nodes in rank blocks (STRATA_RANKS_PER_NODE=k on one host, or real nodes); leave
// STRATA_MPI_HIERARCHICAL_MIN_BYTES unset (each communicator here sets its own threshold).
//
// Per unit of U elements (fp32), N ranks on n nodes of k:
//   flat          reduce-scatter (U/N per rank) + all-gather (U/N), every message direct;
//   hierarchical  the same two collectives through nodes, then among nodes (chained sums);
//   hybrid        reduce-scatter within the node (U/k) + all-reduce of the shard across the
//                 nodes, among the ranks holding it (U/k) + all-gather within the node (U/k);
//   and all-reduce of the whole unit (stage 0), flat and hierarchical, and MPI_Allreduce
//   (Open MPI's choice of coll component: pass --mca coll_han_priority 100 for coll/han) for
//   time only.
// Rank 0 prints one line per scheme: bytes across and within nodes summed over every rank,
// the formula's sums, and the median time of --iterations runs. Times on one host measure
// shared memory, not links: only a run whose inter-node links are rate-limited (tc tbf)
// compares the schemes' times as a cluster would see them.
// Exit status 0 when every rank's bytes equal the formulas.
// Usage: mpirun -np N -x STRATA_RANKS_PER_NODE=k mpi_layouts_bench [--elements=U]
//        [--iterations=I]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "collectives/traffic_formulas.h"
#include "device/cpu_device.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Scheme {
  std::string name;
  // Issues the scheme's collectives on the stream (returns the first issue error).
  std::function<Status()> issue;
  std::vector<const Communicator*> counted;  // whose NodeTraffic counts its bytes
  TrafficBytes expected;                     // this rank's, by the formulas
  bool timed_only = false;                   // MPI_Allreduce: not counted
};

TrafficBytes Sent(const std::vector<const Communicator*>& comms) {
  TrafficBytes total;
  for (const Communicator* comm : comms) {
    const TrafficBytes sent = comm->node_traffic()->sent();
    total.within_node += sent.within_node;
    total.across_nodes += sent.across_nodes;
  }
  return total;
}

TrafficBytes Add(TrafficBytes a, const TrafficBytes& b) {
  a.within_node += b.within_node;
  a.across_nodes += b.across_nodes;
  return a;
}

// Sums over the ranks of MPI_COMM_WORLD.
TrafficBytes SumOverRanks(const TrafficBytes& mine) {
  uint64_t values[2] = {mine.within_node, mine.across_nodes}, sums[2] = {0, 0};
  MPI_Allreduce(values, sums, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return TrafficBytes{sums[0], sums[1]};
}

int Main(int argc, char** argv) {
  size_t elements = 7087872;  // one GPT-2 124M block (12 x 768^2 + 13 x 768)
  int iterations = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--elements=", 0) == 0) {
      elements = std::strtoull(arg.c_str() + 11, nullptr, 10);
    } else if (arg.rfind("--iterations=", 0) == 0) {
      iterations = std::atoi(arg.c_str() + 13);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (std::getenv("STRATA_MPI_HIERARCHICAL_MIN_BYTES") != nullptr) {
    std::fprintf(stderr, "unset STRATA_MPI_HIERARCHICAL_MIN_BYTES: each scheme sets its own\n");
    return 2;
  }
  MpiOptions flat_options, hierarchical_options;
  flat_options.hierarchical_min_bytes = MpiOptions::kNeverHierarchical;
  hierarchical_options.hierarchical_min_bytes = 0;
  auto flat = CreateMpiCommunicator(flat_options);
  auto hierarchical = CreateMpiCommunicator(hierarchical_options);
  if (!flat.ok() || !hierarchical.ok()) {
    std::fprintf(stderr, "%s\n",
                 (!flat.ok() ? flat.status() : hierarchical.status()).ToString().c_str());
    return 1;
  }
  const int rank = (*flat)->rank(), world = (*flat)->world_size();
  const NodeTraffic* nodes = (*flat)->node_traffic();
  const int k = nodes->ranks_per_node(), n = nodes->nodes();
  if (k <= 0 || elements % (static_cast<size_t>(world) * k) != 0) {
    // The formulas are exact for U a multiple of N * k (then U/N, U/k, U/k/n are whole).
    elements -= elements % (static_cast<size_t>(world) * std::max(k, 1) * std::max(n, 1));
  }
  StatusOr<NodeGroups> groups = nodes->SplitByNode();
  if (!groups.ok()) {
    std::fprintf(stderr, "%s\n", groups.status().ToString().c_str());
    return 1;
  }
  auto device = CreateCpuDevice(CpuDeviceOptions{});
  auto stream = device->CreateStream("comm");
  if (!stream.ok()) return 1;
  Stream& s = **stream;

  const size_t U = elements, b = sizeof(float);
  std::vector<float> full(U), shard(U / world), node_shard(U / k), gathered(U);
  for (size_t i = 0; i < U; ++i) full[i] = static_cast<float>((i * 7 + rank) % 13) - 6.0f;
  // The layout the communicator found (MPI's nodes, or STRATA_RANKS_PER_NODE).
  ExpectedLayout world_layout;
  world_layout.ranks_per_node = k;
  world_layout.nodes = n;
  ExpectedLayout never = world_layout, always = world_layout;
  never.min_bytes = ~uint64_t{0};
  always.min_bytes = 0;
  ExpectedLayout node_layout;  // one node of k
  node_layout.ranks_per_node = k;
  node_layout.nodes = 1;
  ExpectedLayout rail_layout;  // n nodes of 1
  rail_layout.ranks_per_node = 1;
  rail_layout.nodes = n;
  auto formula = [&](CollectiveOp op, const ExpectedLayout& layout, int r, uint64_t count) {
    return Formula(op, layout, r, count, b).sent;
  };
  Communicator& flat_comm = **flat;
  Communicator& hier_comm = **hierarchical;
  Communicator& node_comm = *groups->node;
  Communicator& rail_comm = *groups->rail;

  std::vector<Scheme> schemes;
  for (auto* entry : {&flat_comm, &hier_comm}) {
    Communicator& comm = *entry;
    const ExpectedLayout& layout = entry == &flat_comm ? never : always;
    schemes.push_back({entry == &flat_comm ? "flat  RS+AG" : "hier  RS+AG",
                       [&comm, &full, &shard, &gathered, &s, U, world] {
                         RETURN_IF_ERROR(comm.ReduceScatter(full.data(), shard.data(), U / world,
                                                            DType::kF32, s));
                         return comm.AllGather(shard.data(), gathered.data(), U / world,
                                               DType::kF32, s);
                       },
                       {&comm},
                       Add(formula(CollectiveOp::kReduceScatter, layout, rank, U / world),
                           formula(CollectiveOp::kAllGather, layout, rank, U / world))});
  }
  schemes.push_back(
      {"hybrid RS+AR+AG",
       [&] {
         RETURN_IF_ERROR(
             node_comm.ReduceScatter(full.data(), node_shard.data(), U / k, DType::kF32, s));
         RETURN_IF_ERROR(rail_comm.AllReduce(node_shard.data(), U / k, DType::kF32, s));
         return node_comm.AllGather(node_shard.data(), gathered.data(), U / k, DType::kF32, s);
       },
       {&node_comm, &rail_comm},
       Add(Add(formula(CollectiveOp::kReduceScatter, node_layout, node_comm.rank(), U / k),
               formula(CollectiveOp::kAllReduce, rail_layout, rail_comm.rank(), U / k)),
           formula(CollectiveOp::kAllGather, node_layout, node_comm.rank(), U / k))});
  for (auto* entry : {&flat_comm, &hier_comm}) {
    Communicator& comm = *entry;
    schemes.push_back(
        {entry == &flat_comm ? "flat  AR" : "hier  AR",
         [&comm, &gathered, &s, U] { return comm.AllReduce(gathered.data(), U, DType::kF32, s); },
         {&comm},
         formula(CollectiveOp::kAllReduce, entry == &flat_comm ? never : always, rank, U)});
  }
  schemes.push_back({"MPI_Allreduce", nullptr, {}, {}, true});

  if (rank == 0) {
    std::printf(
        "%d ranks as %d node(s) x %d, U = %zu fp32 elements (%.1f MiB) per unit; bytes summed "
        "over the ranks, per run\n",
        world, n, k, U, U * 4.0 / (1 << 20));
    std::printf("%-16s %14s %14s %14s %14s %10s\n", "scheme", "across B", "formula", "within B",
                "formula", "median ms");
  }
  int failures = 0;
  for (Scheme& scheme : schemes) {
    std::vector<double> times;
    TrafficBytes measured;
    for (int i = 0; i < iterations; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const TrafficBytes before = scheme.timed_only ? TrafficBytes{} : Sent(scheme.counted);
      const auto start = Clock::now();
      if (scheme.timed_only) {
        // Out of place: Open MPI 4.1.4's coll/han crashed on MPI_IN_PLACE here (a read at
        // MPI_IN_PLACE + 64 KiB, seen with --mca coll_han_priority 100).
        MPI_Allreduce(full.data(), gathered.data(), static_cast<int>(U), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      } else {
        Status status = scheme.issue();
        if (status.ok()) status = s.Synchronize();
        if (!status.ok()) {
          std::fprintf(stderr, "%s: %s\n", scheme.name.c_str(), status.ToString().c_str());
          return 1;
        }
      }
      double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times.push_back(elapsed);
      if (!scheme.timed_only) {
        const TrafficBytes after = Sent(scheme.counted);
        measured = {after.within_node - before.within_node,
                    after.across_nodes - before.across_nodes};
      }
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    if (scheme.timed_only) {
      if (rank == 0) {
        std::printf("%-16s %14s %14s %14s %14s %10.2f\n", scheme.name.c_str(), "-", "-", "-", "-",
                    median);
      }
      continue;
    }
    const bool exact = measured.within_node == scheme.expected.within_node &&
                       measured.across_nodes == scheme.expected.across_nodes;
    if (!exact) {
      ++failures;
      std::fprintf(stderr, "rank %d: %s sent %llu across + %llu within, formula %llu + %llu\n",
                   rank, scheme.name.c_str(), (unsigned long long)measured.across_nodes,
                   (unsigned long long)measured.within_node,
                   (unsigned long long)scheme.expected.across_nodes,
                   (unsigned long long)scheme.expected.within_node);
    }
    const TrafficBytes total = SumOverRanks(measured);
    const TrafficBytes total_expected = SumOverRanks(scheme.expected);
    if (rank == 0) {
      std::printf("%-16s %14llu %14llu %14llu %14llu %10.2f\n", scheme.name.c_str(),
                  (unsigned long long)total.across_nodes,
                  (unsigned long long)total_expected.across_nodes,
                  (unsigned long long)total.within_node,
                  (unsigned long long)total_expected.within_node, median);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("%s: every rank's bytes %s the formulas\n", failures == 0 ? "PASS" : "FAIL",
                failures == 0 ? "equal" : "differ from");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
