// The Communicator of a dry run (strata plan): rank `rank` of a world of `world` ranks
// that exist only on paper. Every collective is checked like a real one (CheckedCommunicator)
// and does nothing else: no data moves, nobody is waited for. It counts what each rank
// would send over the network for it, as a ring implementation does: all-reduce 2(w-1)/w
// of the buffer, reduce-scatter and all-gather (w-1)/w of the full buffer, broadcast the
// buffer once; so the plan can price the collectives of a step. Given a node layout (its
// ranks in nodes of `ranks_per_node`), it also splits them into bytes sent within and
// across nodes as the MPI communicator's node-aware collectives would (the formulas of
// docs/multinode.md, collectives/traffic_formulas.h): within as rank 0 sends them, across as
// the rank of the node that sends the most does (the hierarchical chain's last node).
// Thread-safety: as Communicator; the counters are atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "collectives/communicator.h"

namespace strata {

class DryCommunicator : public CheckedCommunicator {
 public:
  // `ranks_per_node` 0: all ranks on one node; else it must divide `world`.
  DryCommunicator(int rank, int world, int ranks_per_node = 0)
      : rank_(rank), world_(world), ranks_per_node_(ranks_per_node > 0 ? ranks_per_node : world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void Abort(const std::string&) override {}
  std::string Describe() const override;
  // Bytes this rank would have sent so far, and the collectives issued.
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t collectives() const { return collectives_.load(); }
  // Bytes sent within and across nodes so far (see the top of this file).
  TrafficBytes traffic() const { return {within_.load(), across_.load()}; }

 protected:
  Status Issue(const CollectiveCall& call, const void* input, void* output,
               Stream& stream) override;

 private:
  const int rank_, world_, ranks_per_node_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> within_{0}, across_{0};
  std::atomic<uint64_t> collectives_{0};
};

}  // namespace strata
