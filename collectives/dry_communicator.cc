// See dry_communicator.h.
#include "collectives/dry_communicator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/traffic_formulas.h"

namespace strata {

std::string DryCommunicator::Describe() const {
  return absl::StrCat("dry-run rank ", rank_, " of ", world_);
}

Status DryCommunicator::Issue(const CollectiveCall& call, const void*, void*, Stream&) {
  const double w = world_;
  const double bytes = static_cast<double>(call.count) * DTypeBytes(call.dtype);
  double sent = 0.0;
  switch (call.op) {
    case CollectiveOp::kAllReduce: sent = 2.0 * (w - 1.0) / w * bytes; break;
    // The count is per rank: the full buffer is w times it.
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllGather: sent = (w - 1.0) * bytes; break;
    case CollectiveOp::kBroadcast: sent = world_ > 1 ? bytes : 0.0; break;
    default: break;
  }
  bytes_sent_ += static_cast<uint64_t>(sent);
  ++collectives_;
  if (world_ > 1 && call.op != CollectiveOp::kBarrier) {
    ExpectedLayout layout;
    layout.ranks_per_node = ranks_per_node_;
    layout.nodes = world_ / ranks_per_node_;
    const uint64_t b = DTypeBytes(call.dtype);
    if (call.op == CollectiveOp::kBroadcast) {  // what its root sends
      const int root = std::max(call.root, 0);
      const TrafficBytes sent = Formula(call.op, layout, root, call.count, b, root).sent;
      within_ += sent.within_node;
      across_ += sent.across_nodes;
    } else {
      uint64_t across = 0;
      for (int node = 0; node < layout.nodes; ++node) {
        across = std::max(
            across, Formula(call.op, layout, node * ranks_per_node_, call.count, b).sent.across_nodes);
      }
      within_ += Formula(call.op, layout, 0, call.count, b).sent.within_node;
      across_ += across;
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
