// See dry_communicator.h.
#include "collectives/dry_communicator.h"

#include "absl/strings/str_cat.h"

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
  return absl::OkStatus();
}

}  // namespace strata
