// The bytes one rank sends in one collective of the MPI communicator, within and across
// nodes, by the formulas of docs/multinode.md ("Bytes"), written independently of the
// communicator: what mpi_collectives_check and mpi_layouts_bench compare the communicator's
// counters (NodeTraffic::sent) with. Also the node layout the environment asks for.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "collectives/communicator.h"

namespace strata {

// The node layout the environment asks for, as a check expects it: k ranks per node
// (STRATA_RANKS_PER_NODE, else every rank on one node) and the hierarchical threshold
// (STRATA_MPI_HIERARCHICAL_MIN_BYTES: a number of bytes or "never"; else 1 MiB).
struct ExpectedLayout {
  int ranks_per_node = 1;
  int nodes = 1;
  uint64_t min_bytes = 1u << 20;
};
ExpectedLayout ReadExpectedLayout(int world);

// What one rank sends in one collective, for counts where the formulas are exact: c a
// multiple of N for the flat all-reduce, of k for the hierarchical one. N ranks, n nodes of
// k, this rank on node m, b bytes per element, fp32 partials; `hierarchical` says which
// path the rules of docs/multinode.md pick.
struct ExpectedTraffic {
  bool hierarchical = false;
  TrafficBytes sent;
};
ExpectedTraffic Formula(CollectiveOp op, const ExpectedLayout& layout, int rank, uint64_t c,
                        uint64_t b, int root = 0);

}  // namespace strata
