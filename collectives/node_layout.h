// The node layout the MPI collectives assume: which node (machine) each rank is on, and
// whether the nodes are equal blocks of consecutive ranks (node m = ranks m*k .. m*k+k-1),
// which the hierarchical algorithms need to keep the fixed rank-order sums
// (mpi_communicator.h). Discovered from MPI (each rank's first node-mate under
// MPI_COMM_TYPE_SHARED), or overridden with "k ranks per node" so that one host can play
// several nodes in tests (STRATA_RANKS_PER_NODE, docs/multinode.md).
// Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

struct NodeLayout {
  int nodes = 1;
  // Ranks on every node; 0 when the nodes differ in size.
  int ranks_per_node = 1;
  // Node m holds exactly the ranks m*k .. m*k+k-1 (k = ranks_per_node > 0).
  bool blocks = true;
  // The node of every rank (0 .. nodes-1, numbered by their lowest rank).
  std::vector<int> node_of_rank;
  // Where the layout came from: "MPI_COMM_TYPE_SHARED" or "STRATA_RANKS_PER_NODE=2".
  std::string source;

  int world() const { return static_cast<int>(node_of_rank.size()); }
  // "2 nodes x 2 ranks (STRATA_RANKS_PER_NODE=2)", "3 nodes of unequal sizes (...)".
  std::string Describe() const;
};

// The layout MPI reports: first_rank_of_node[r] is the lowest world rank on rank r's node.
NodeLayout DiscoveredLayout(const std::vector<int>& first_rank_of_node);

// k ranks per node over `world` ranks, node m = ranks m*k .. m*k+k-1. kInvalidArgument
// naming the variable when k < 1 or k does not divide the world.
StatusOr<NodeLayout> OverriddenLayout(int world, int ranks_per_node);

// The value of STRATA_RANKS_PER_NODE: a decimal integer >= 1, nothing else (no sign, no
// fraction, no trailing text, no overflow); errors quote the text.
StatusOr<int> ParseRanksPerNode(const std::string& text);

}  // namespace strata
