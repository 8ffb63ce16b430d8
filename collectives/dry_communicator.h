// The Communicator of a dry run (strata plan): rank `rank` of a world of `world` ranks
// that exist only on paper. Every collective is checked like a real one (CheckedCommunicator)
// and does nothing else: no data moves, nobody is waited for. It counts what each rank
// would send over the network for it, as a ring implementation does: all-reduce 2(w-1)/w
// of the buffer, reduce-scatter and all-gather (w-1)/w of the full buffer, broadcast the
// buffer once; so the plan can price the collectives of a step.
// Thread-safety: as Communicator; the counter is atomic.
#pragma once

#include <cstdint>
#include <memory>

#include "collectives/communicator.h"

namespace strata {

class DryCommunicator : public CheckedCommunicator {
 public:
  DryCommunicator(int rank, int world) : rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void Abort(const std::string&) override {}
  std::string Describe() const override;
  // Bytes this rank would have sent so far, and the collectives issued.
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t collectives() const { return collectives_.load(); }

 protected:
  Status Issue(const CollectiveCall& call, const void* input, void* output,
               Stream& stream) override;

 private:
  const int rank_, world_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> collectives_{0};
};

}  // namespace strata
