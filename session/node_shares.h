// What every rank got of its node: its place among the node's ranks as its communicator
// sees it (MPI: MPI_Comm_split_type, whatever launched the processes: mpirun, srun with
// PMIx; threads: all ranks on one node) and the tier capacities its share of the node's
// memory gave it. Rank 0 logs one line of it at start-up, and a warning where the node
// grouping MPI reports differs from the host names (GPUs and memory shares follow MPI's).
// Thread-safety: GatherRankPlaces as the communicator; the rest are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/status.h"

namespace strata {

struct RankPlace {
  std::string host;
  int local_rank = 0;  // Communicator::local_rank: the GPU it picks, its memory share
  int local_size = 1;  // Communicator::local_size: ranks sharing its node's memory
  uint64_t device_bytes = 0;  // the capacity of its device tier
  uint64_t host_bytes = 0;    // the capacity of its host tier
};

// Every rank's place, in rank order (every rank calls it, on the control communicator).
StatusOr<std::vector<RankPlace>> GatherRankPlaces(Communicator& communicator,
                                                  const RankPlace& mine);

// One clause per host, in order of first rank:
// "node0: ranks 0-1 (local ranks 0-1 of 2), each device 5.15 GiB + host 5.15 GiB; node1: ..."
// Ranks of a host whose tiers differ are listed one by one ("device 1 GiB/2 GiB + host ...").
std::string DescribeNodeShares(const std::vector<RankPlace>& places);

// Empty where, on every host, the ranks (in rank order) are local ranks 0..n-1 of n, as
// MPI_Comm_split_type with the world rank as key makes them; otherwise one clause per host
// that differs, e.g. "node0 has ranks 0-3, which MPI makes local ranks 0,1,0,1 of 2,2,2,2".
std::string NodePlaceMismatch(const std::vector<RankPlace>& places);

// The text one rank sends for its place, and back (kInvalidArgument on a malformed text).
std::string SerializeRankPlace(const RankPlace& place);
StatusOr<RankPlace> ParseRankPlace(const std::string& text);

}  // namespace strata
