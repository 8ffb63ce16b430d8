// The node layout: discovery from each rank's first node-mate (blocks, unequal nodes,
// interleaved ranks), the override's validation and the strict parse of its value.
#include "collectives/node_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(NodeLayout, DiscoveredBlocks) {
  const NodeLayout layout = DiscoveredLayout({0, 0, 2, 2, 4, 4});
  EXPECT_EQ(layout.nodes, 3);
  EXPECT_EQ(layout.ranks_per_node, 2);
  EXPECT_TRUE(layout.blocks);
  EXPECT_THAT(layout.node_of_rank, ElementsAre(0, 0, 1, 1, 2, 2));
  EXPECT_EQ(layout.Describe(), "3 nodes x 2 ranks (MPI_COMM_TYPE_SHARED)");
}

TEST(NodeLayout, DiscoveredOneNode) {
  const NodeLayout layout = DiscoveredLayout({0, 0, 0});
  EXPECT_EQ(layout.nodes, 1);
  EXPECT_EQ(layout.ranks_per_node, 3);
  EXPECT_TRUE(layout.blocks);
}

TEST(NodeLayout, DiscoveredInterleavedIsNotBlocks) {
  // mpirun --map-by node: ranks 0 and 2 on one machine, 1 and 3 on the other.
  const NodeLayout layout = DiscoveredLayout({0, 1, 0, 1});
  EXPECT_EQ(layout.nodes, 2);
  EXPECT_EQ(layout.ranks_per_node, 2);
  EXPECT_FALSE(layout.blocks);
  EXPECT_THAT(layout.node_of_rank, ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(layout.Describe(), HasSubstr("not in rank blocks"));
}

TEST(NodeLayout, DiscoveredUnequalNodes) {
  const NodeLayout layout = DiscoveredLayout({0, 0, 0, 3});
  EXPECT_EQ(layout.nodes, 2);
  EXPECT_EQ(layout.ranks_per_node, 0);
  EXPECT_FALSE(layout.blocks);
  EXPECT_THAT(layout.Describe(), HasSubstr("unequal"));
}

TEST(NodeLayout, Overridden) {
  ASSERT_OK_AND_ASSIGN(NodeLayout layout, OverriddenLayout(6, 3));
  EXPECT_EQ(layout.nodes, 2);
  EXPECT_EQ(layout.ranks_per_node, 3);
  EXPECT_TRUE(layout.blocks);
  EXPECT_THAT(layout.node_of_rank, ElementsAre(0, 0, 0, 1, 1, 1));
  EXPECT_EQ(layout.Describe(), "2 nodes x 3 ranks (STRATA_RANKS_PER_NODE=3)");
}

TEST(NodeLayout, OverrideMustDivideTheWorld) {
  EXPECT_THAT(OverriddenLayout(3, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("STRATA_RANKS_PER_NODE=2"),
                             HasSubstr("does not divide the world of 3 ranks"))));
  EXPECT_THAT(OverriddenLayout(4, 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NodeLayout, ParseRanksPerNodeIsStrict) {
  EXPECT_THAT(ParseRanksPerNode("2"), IsOkAndHolds(2));
  EXPECT_THAT(ParseRanksPerNode("16"), IsOkAndHolds(16));
  for (const char* bad : {"", "0", "-2", "+2", "2.5", "2x", " 2", "99999999999"}) {
    EXPECT_THAT(ParseRanksPerNode(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("STRATA_RANKS_PER_NODE")))
        << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace strata
