// The node layout of the MPI collectives. See node_layout.h.
#include "collectives/node_layout.h"

#include <map>

namespace strata {

std::string NodeLayout::Describe() const {
  if (ranks_per_node > 0) {
    return absl::StrCat(nodes, " node", nodes == 1 ? "" : "s", " x ", ranks_per_node, " rank",
                        ranks_per_node == 1 ? "" : "s", blocks ? "" : " (not in rank blocks)", " (",
                        source, ")");
  }
  return absl::StrCat(nodes, " nodes of unequal sizes (", source, ")");
}

NodeLayout DiscoveredLayout(const std::vector<int>& first_rank_of_node) {
  NodeLayout layout;
  layout.source = "MPI_COMM_TYPE_SHARED";
  std::map<int, int> node_of_first;  // ordered by the node's lowest rank
  for (int first : first_rank_of_node) node_of_first.emplace(first, 0);
  int next = 0;
  for (auto& [first, node] : node_of_first) node = next++;
  layout.nodes = next;
  std::vector<int> sizes(next, 0);
  for (int first : first_rank_of_node) {
    const int node = node_of_first[first];
    layout.node_of_rank.push_back(node);
    ++sizes[node];
  }
  layout.ranks_per_node = sizes.empty() ? 0 : sizes[0];
  for (int size : sizes) {
    if (size != layout.ranks_per_node) layout.ranks_per_node = 0;
  }
  layout.blocks = layout.ranks_per_node > 0;
  for (int r = 0; r < layout.world() && layout.blocks; ++r) {
    if (layout.node_of_rank[r] != r / layout.ranks_per_node) layout.blocks = false;
  }
  return layout;
}

StatusOr<NodeLayout> OverriddenLayout(int world, int ranks_per_node) {
  const std::string source = absl::StrCat("STRATA_RANKS_PER_NODE=", ranks_per_node);
  if (ranks_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ranks per node must be >= 1"));
  }
  if (world % ranks_per_node != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " does not divide the world of ", world,
                     " ranks: every node must hold the same number of ranks (use a divisor of ",
                     world, ", or leave the variable unset to take the layout from MPI)"));
  }
  NodeLayout layout;
  layout.source = source;
  layout.nodes = world / ranks_per_node;
  layout.ranks_per_node = ranks_per_node;
  layout.blocks = true;
  for (int r = 0; r < world; ++r) layout.node_of_rank.push_back(r / ranks_per_node);
  return layout;
}

StatusOr<int> ParseRanksPerNode(const std::string& text) {
  const auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("STRATA_RANKS_PER_NODE='", text, "': ", why,
                                                   " (a whole number of ranks >= 1)"));
  };
  if (text.empty()) return bad("empty");
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return bad("not a decimal integer");
    value = value * 10 + (c - '0');
    if (value > (1 << 24)) return bad("too large");
  }
  if (value < 1) return bad("must be at least 1");
  return static_cast<int>(value);
}

}  // namespace strata
