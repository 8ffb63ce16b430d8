// The byte formulas of docs/multinode.md; see traffic_formulas.h.
#include "collectives/traffic_formulas.h"

#include <cstdlib>
#include <string>

namespace strata {

ExpectedLayout ReadExpectedLayout(int world) {
  ExpectedLayout layout;
  layout.ranks_per_node = world;
  if (const char* k = std::getenv("STRATA_RANKS_PER_NODE")) layout.ranks_per_node = std::atoi(k);
  layout.nodes = world / layout.ranks_per_node;
  if (const char* bytes = std::getenv("STRATA_MPI_HIERARCHICAL_MIN_BYTES")) {
    layout.min_bytes =
        std::string(bytes) == "never" ? ~uint64_t{0} : std::strtoull(bytes, nullptr, 10);
  }
  return layout;
}

ExpectedTraffic Formula(CollectiveOp op, const ExpectedLayout& layout, int rank, uint64_t c,
                        uint64_t b, int root) {
  const uint64_t N = layout.nodes * layout.ranks_per_node, n = layout.nodes,
                 k = layout.ranks_per_node, m = rank / layout.ranks_per_node;
  ExpectedTraffic t;
  uint64_t bytes = c * b * (op == CollectiveOp::kAllReduce ? 1 : N);
  const bool large = n > 1 && k > 1 && bytes > 0 && bytes >= layout.min_bytes;
  switch (op) {
    case CollectiveOp::kAllReduce:
      t.hierarchical = large && 4 + b < 2 * k * b;
      if (t.hierarchical) {
        t.sent.within_node = 2 * (k - 1) * (c / k) * b;
        t.sent.across_nodes = m < n - 1 ? (c / k) * 4 : (n - 1) * (c / k) * b;
      } else {
        t.sent.within_node = 2 * (k - 1) * (c / N) * b;
        t.sent.across_nodes = 2 * (N - k) * (c / N) * b;
      }
      break;
    case CollectiveOp::kReduceScatter:
      t.hierarchical = large && 4 * n + b < n * k * b;
      if (t.hierarchical) {
        t.sent.within_node = (k - 1) * n * c * b;
        t.sent.across_nodes = m < n - 1 ? n * c * 4 : (n - 1) * c * b;
      } else {
        t.sent.within_node = (k - 1) * c * b;
        t.sent.across_nodes = (N - k) * c * b;
      }
      break;
    case CollectiveOp::kAllGather:
      t.hierarchical = large;
      if (t.hierarchical) {
        t.sent.within_node = (k - 1) * n * c * b;
        t.sent.across_nodes = (n - 1) * c * b;
      } else {
        t.sent.within_node = (k - 1) * c * b;
        t.sent.across_nodes = (N - k) * c * b;
      }
      break;
    case CollectiveOp::kBroadcast:
      if (rank == root) {
        t.sent.within_node = (k - 1) * c * b;
        t.sent.across_nodes = (N - k) * c * b;
      }
      break;
    case CollectiveOp::kBarrier:
      break;
  }
  return t;
}

}  // namespace strata
