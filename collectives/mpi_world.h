// What the MPI communicator is given and what it finds (collectives/mpi_communicator.h):
// its options and this process's place in the MPI world. Apart from the communicator,
// so that the MPI internals (mpi_process.h, mpi_state.h) need not include it.
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace strata {

struct MpiOptions {
  // zero.comm_timeout_s: how long one collective may take before it fails with
  // kDeadlineExceeded naming the ranks that did not answer, and how long one may wait on
  // its stream to start (start_watch.h; the peers are told). Must be > 0.
  double timeout_s = 300.0;

  // Performance: the most scratch memory one reduction uses (received chunks waiting to be
  // summed), per communicator; larger reductions run in segments. 4 KiB .. 1 GiB.
  size_t max_scratch_bytes = 64u << 20;

  // The node layout the collectives assume (node_layout.h): 0 takes it from MPI (ranks
  // sharing memory, MPI_COMM_TYPE_SHARED); k >= 1 says k ranks per node, node m = ranks
  // m*k .. m*k+k-1, so that one host can play several nodes (tests, benchmarks). The
  // environment variable STRATA_RANKS_PER_NODE, when set, replaces this value. Every rank
  // must use the same layout (checked when the communicator is created).
  int ranks_per_node = 0;

  // Performance: all-reduce, reduce-scatter and all-gather take the hierarchical path
  // (within nodes, then among nodes; mpi_communicator.h) when the layout has more than one
  // node, more than one rank per node, nodes in rank blocks, and the collective moves at
  // least this many bytes (all-reduce: its buffer; reduce-scatter: its input; all-gather:
  // its output); otherwise the flat path. 0: always where the layout allows;
  // kNeverHierarchical: never. STRATA_MPI_HIERARCHICAL_MIN_BYTES (a byte size such as
  // "0", "256KiB", or "never"), when set, replaces this value.
  static constexpr uint64_t kNeverHierarchical = std::numeric_limits<uint64_t>::max();
  uint64_t hierarchical_min_bytes = 1u << 20;
};

// A process's place in MPI_COMM_WORLD (GetMpiWorld).
struct MpiWorld {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes on this node (the GPU to use)
  int local_size = 1;
  std::string host;
  // For every rank of the world, the lowest world rank on its node (MPI_COMM_TYPE_SHARED).
  std::vector<int> first_rank_of_node;
};

}  // namespace strata
