// Tests the node-share line: ranks grouped by host with their local ranks and tier
// capacities; the mismatch between MPI's node grouping and the host names; a place's text
// round trip; and the gather among ranks (threads here, as under mpirun or srun).
#include "session/node_shares.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "collectives/local_communicator.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

constexpr uint64_t kGiB = 1ull << 30;

RankPlace Place(const std::string& host, int local_rank, int local_size, uint64_t device = kGiB,
                uint64_t host_bytes = 2 * kGiB) {
  return RankPlace{host, local_rank, local_size, device, host_bytes};
}

TEST(DescribeNodeShares, TwoNodesOfTwoRanks) {
  EXPECT_EQ(DescribeNodeShares({Place("node0", 0, 2), Place("node0", 1, 2), Place("node1", 0, 2),
                                Place("node1", 1, 2)}),
            "node0: ranks 0-1 (local ranks 0-1 of 2), each device 1.00 GiB + host 2.00 GiB; "
            "node1: ranks 2-3 (local ranks 0-1 of 2), each device 1.00 GiB + host 2.00 GiB");
}

TEST(DescribeNodeShares, OneRankPerNodeAndInterleavedRanks) {
  EXPECT_EQ(DescribeNodeShares({Place("a", 0, 1, kGiB, kGiB)}),
            "a: rank 0 (local rank 0 of 1), device 1.00 GiB + host 1.00 GiB");
  EXPECT_EQ(DescribeNodeShares({Place("a", 0, 2), Place("b", 0, 1), Place("a", 1, 2)}),
            "a: ranks 0,2 (local ranks 0-1 of 2), each device 1.00 GiB + host 2.00 GiB; "
            "b: rank 1 (local rank 0 of 1), device 1.00 GiB + host 2.00 GiB");
}

TEST(DescribeNodeShares, RanksWithDifferentTiersAreListedOneByOne) {
  EXPECT_EQ(DescribeNodeShares({Place("a", 0, 2, kGiB, kGiB), Place("a", 1, 2, 2 * kGiB, kGiB)}),
            "a: ranks 0-1 (local ranks 0-1 of 2), device 1.00 GiB/2.00 GiB + host 1.00 GiB");
}

TEST(NodePlaceMismatch, NoneWhereMpiGroupsByHost) {
  EXPECT_EQ(NodePlaceMismatch({Place("a", 0, 2), Place("a", 1, 2), Place("b", 0, 2),
                               Place("b", 1, 2)}),
            "");
  EXPECT_EQ(NodePlaceMismatch({Place("a", 0, 2), Place("b", 0, 1), Place("a", 1, 2)}), "");
}

TEST(NodePlaceMismatch, NamesTheHostsWhereMpiDiffers) {
  // One host name on two machines (containers with one name): MPI sees two nodes.
  EXPECT_EQ(NodePlaceMismatch({Place("c", 0, 2), Place("c", 1, 2), Place("c", 0, 2),
                               Place("c", 1, 2)}),
            "c has ranks 0-3, which MPI makes local ranks 0,1,0,1 of 2,2,2,2");
  // A launcher that told MPI every rank is alone on its node.
  EXPECT_EQ(NodePlaceMismatch({Place("a", 0, 1), Place("a", 0, 1), Place("b", 0, 1)}),
            "a has ranks 0-1, which MPI makes local ranks 0,0 of 1,1");
  EXPECT_EQ(NodePlaceMismatch({Place("a", 0, 2)}),
            "a has rank 0, which MPI makes local rank 0 of 2");
}

TEST(RankPlaceText, RoundTripsAndRejectsMalformed) {
  const RankPlace place = Place("host\twith tab", 3, 4, 123, 456);
  ASSERT_OK_AND_ASSIGN(RankPlace back, ParseRankPlace(SerializeRankPlace(place)));
  EXPECT_EQ(back.host, place.host);
  EXPECT_EQ(back.local_rank, 3);
  EXPECT_EQ(back.local_size, 4);
  EXPECT_EQ(back.device_bytes, 123u);
  EXPECT_EQ(back.host_bytes, 456u);
  EXPECT_THAT(ParseRankPlace("1\t2\tx\t4\th"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed")));
  EXPECT_THAT(ParseRankPlace("1\t2"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GatherRankPlaces, EveryRankGetsEveryPlaceInRankOrder) {
  constexpr int kWorld = 3;
  ASSERT_OK_AND_ASSIGN(auto group, CreateLocalGroup(kWorld, LocalGroupOptions{}));
  std::vector<std::vector<RankPlace>> seen(kWorld);
  std::vector<Status> status(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      StatusOr<std::vector<RankPlace>> places = GatherRankPlaces(
          *group[r], Place(r == 2 ? "b" : "a", r == 2 ? 0 : r, r == 2 ? 1 : 2, kGiB * (r + 1)));
      status[r] = places.status();
      if (places.ok()) seen[r] = *places;
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_OK(status[r]);
    ASSERT_EQ(seen[r].size(), 3u);
    EXPECT_EQ(DescribeNodeShares(seen[r]),
              "a: ranks 0-1 (local ranks 0-1 of 2), device 1.00 GiB/2.00 GiB + host 2.00 GiB; "
              "b: rank 2 (local rank 0 of 1), device 3.00 GiB + host 2.00 GiB");
  }
}

}  // namespace
}  // namespace strata
