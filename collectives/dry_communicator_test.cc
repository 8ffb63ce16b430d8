// The dry-run communicator: real argument checks, no data moved, ring bytes counted.
#include "collectives/dry_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "device/cpu_device.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using testing::StatusIs;

TEST(DryCommunicator, CountsRingBytesAndMovesNothing) {
  auto device = CreateCpuDevice({});
  ASSERT_OK_AND_ASSIGN(auto stream, device->CreateStream("comm"));
  DryCommunicator comm(1, 4);
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.world_size(), 4);
  std::vector<float> data(400, 1.0f), out(400, 7.0f);
  // All-reduce of 100 fp32: 2 * 3/4 * 400 bytes.
  ASSERT_OK(comm.AllReduce(data.data(), 100, DType::kF32, *stream));
  EXPECT_EQ(comm.bytes_sent(), 600u);
  // All-gather of 100 per rank: 3 * 400 bytes; the output is untouched.
  ASSERT_OK(comm.AllGather(data.data(), out.data(), 100, DType::kF32, *stream));
  EXPECT_EQ(comm.bytes_sent(), 600u + 1200u);
  ASSERT_OK(comm.ReduceScatter(data.data(), out.data(), 100, DType::kBF16, *stream));
  EXPECT_EQ(comm.bytes_sent(), 600u + 1200u + 600u);
  ASSERT_OK(stream->Synchronize());
  for (float v : out) ASSERT_EQ(v, 7.0f);
  EXPECT_EQ(comm.collectives(), 3u);
  // Checked like a real one: a null buffer with a count is refused and not counted.
  EXPECT_THAT(comm.AllReduce(nullptr, 10, DType::kF32, *stream),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(comm.collectives(), 3u);
}

TEST(DryCommunicator, OneRankSendsNothing) {
  auto device = CreateCpuDevice({});
  ASSERT_OK_AND_ASSIGN(auto stream, device->CreateStream("comm"));
  DryCommunicator comm(0, 1);
  std::vector<float> data(64);
  ASSERT_OK(comm.AllReduce(data.data(), 64, DType::kF32, *stream));
  ASSERT_OK(comm.Broadcast(data.data(), 64, DType::kF32, 0, *stream));
  EXPECT_EQ(comm.bytes_sent(), 0u);
}

// With a node layout: bytes within and across nodes by the formulas of docs/multinode.md,
// the hierarchical path for collectives of 1 MiB or more (2 nodes of 2 ranks here).
TEST(DryCommunicator, SplitsBytesWithinAndAcrossNodes) {
  auto device = CreateCpuDevice({});
  ASSERT_OK_AND_ASSIGN(auto stream, device->CreateStream("comm"));
  DryCommunicator comm(0, 4, 2);
  const size_t c = 65536;  // per rank: 4 ranks x 64 Ki fp32 = 1 MiB gathered
  std::vector<float> in(c), out(4 * c);
  ASSERT_OK(comm.AllGather(in.data(), out.data(), c, DType::kF32, *stream));
  // Hierarchical: (k-1) n c b within, (n-1) c b across.
  EXPECT_EQ(comm.traffic().within_node, 1u * 2 * c * 4);
  EXPECT_EQ(comm.traffic().across_nodes, 1u * c * 4);
  ASSERT_OK(comm.AllGather(in.data(), out.data(), 100, DType::kF32, *stream));
  // Flat (under 1 MiB): (k-1) c b within, (N-k) c b across.
  EXPECT_EQ(comm.traffic().within_node, 2u * c * 4 + 400);
  EXPECT_EQ(comm.traffic().across_nodes, 1u * c * 4 + 800);
  // A rail (one rank per node): everything crosses; an all-reduce sends 2 (N-1)/N of it.
  DryCommunicator rail(0, 2, 1);
  ASSERT_OK(rail.AllReduce(in.data(), 1000, DType::kF32, *stream));
  EXPECT_EQ(rail.traffic().within_node, 0u);
  EXPECT_EQ(rail.traffic().across_nodes, 4000u);
  // One node: nothing crosses.
  DryCommunicator node(0, 4);
  ASSERT_OK(node.AllGather(in.data(), out.data(), c, DType::kF32, *stream));
  EXPECT_EQ(node.traffic().across_nodes, 0u);
  EXPECT_EQ(node.traffic().within_node, 3u * c * 4);
  ASSERT_OK(stream->Synchronize());
}

}  // namespace
}  // namespace strata
