// The local communicator, nccl-tests style: every rank fills its buffers from (rank, step,
// index) and checks the exact bytes of the result against a scalar rank-order reference
// (test_pattern.h), for world sizes 1-4, counts that divide nothing (1, 7, 1000003), fp32
// and bf16, in place and out of place. Also: determinism and order sensitivity, collectives
// queued back to back, the barrier, the timeout (a rank that never arrives), Abort, ranks
// that disagree, and argument errors. Each rank's collectives run on its own CPU stream
// (a worker thread), as the engine will issue them.
#include "collectives/local_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/stuck_stream_check.h"
#include "collectives/test_pattern.h"
#include "device/cpu_device.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

namespace tp = testing_pattern;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// N local ranks, each with its communicator and comm stream.
class Group {
 public:
  explicit Group(int world_size, double timeout_s = 60.0)
      : device_(CreateCpuDevice(CpuDeviceOptions{})) {
    LocalGroupOptions options;
    options.timeout_s = timeout_s;
    auto group = CreateLocalGroup(world_size, options);
    EXPECT_OK(group);
    if (group.ok()) comms_ = std::move(*group);
    for (int r = 0; r < world_size; ++r) {
      auto stream = device_->CreateStream(absl::StrCat("comm ", r));
      EXPECT_OK(stream);
      // A constructor cannot ASSERT: value() throws on an error, which gtest reports.
      streams_.push_back(std::move(stream).value());
    }
  }

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_[rank]; }
  Stream& stream(int rank) { return *streams_[rank]; }
  Device& device() { return *device_; }
  // Synchronizes every rank's stream; returns each one's status.
  std::vector<Status> SyncAll() {
    std::vector<Status> statuses;
    for (auto& stream : streams_) statuses.push_back(stream->Synchronize());
    return statuses;
  }

 private:
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

void ExpectAllOk(const std::vector<Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_OK(statuses[r]) << r;
}

using Bytes = std::vector<uint8_t>;

Bytes Filled(size_t count, DType dtype, int rank, uint64_t step) {
  Bytes bytes(count * DTypeBytes(dtype));
  tp::Fill(bytes.data(), count, dtype, rank, step);
  return bytes;
}

// ---------------------------------------------------------------------------------------
// Every collective against the exact expected bytes.

class CollectiveTest : public ::testing::TestWithParam<std::tuple<int, DType, size_t>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  size_t count() const { return std::get<2>(GetParam()); }
  size_t bytes(size_t elements) const { return elements * DTypeBytes(dtype()); }
};

constexpr uint64_t kSteps = 2;

TEST_P(CollectiveTest, AllReduceIsTheRankOrderSum) {
  Group group(world());
  for (uint64_t step = 0; step < kSteps; ++step) {
    std::vector<Bytes> data;
    for (int r = 0; r < world(); ++r) data.push_back(Filled(count(), dtype(), r, step));
    for (int r = 0; r < world(); ++r) {
      ASSERT_OK(group.comm(r).AllReduce(data[r].data(), count(), dtype(), group.stream(r)));
    }
    ExpectAllOk(group.SyncAll());
    const Bytes expected =
        tp::Expected(CollectiveOp::kAllReduce, 0, world(), count(), dtype(), step);
    for (int r = 0; r < world(); ++r) {
      EXPECT_EQ(tp::Compare(data[r].data(), expected, dtype()), "") << "rank " << r;
    }
  }
}

TEST_P(CollectiveTest, ReduceScatterInPlaceAndOutOfPlace) {
  Group group(world());
  for (uint64_t step = 0; step < kSteps; ++step) {
    for (bool in_place : {false, true}) {
      std::vector<Bytes> inputs, outputs(world(), Bytes(bytes(count()), 0xab));
      for (int r = 0; r < world(); ++r) {
        inputs.push_back(Filled(count() * world(), dtype(), r, step));
      }
      for (int r = 0; r < world(); ++r) {
        void* output = in_place ? inputs[r].data() + bytes(r * count()) : outputs[r].data();
        ASSERT_OK(group.comm(r).ReduceScatter(inputs[r].data(), output, count(), dtype(),
                                              group.stream(r)));
      }
      ExpectAllOk(group.SyncAll());
      for (int r = 0; r < world(); ++r) {
        const void* output = in_place ? inputs[r].data() + bytes(r * count()) : outputs[r].data();
        const Bytes expected =
            tp::Expected(CollectiveOp::kReduceScatter, r, world(), count(), dtype(), step);
        EXPECT_EQ(tp::Compare(output, expected, dtype()), "")
            << "rank " << r << (in_place ? " in place" : " out of place");
        if (!in_place) {
          // The input is left as it was.
          EXPECT_EQ(inputs[r], Filled(count() * world(), dtype(), r, step)) << "rank " << r;
        }
      }
    }
  }
}

TEST_P(CollectiveTest, AllGatherInPlaceAndOutOfPlace) {
  Group group(world());
  for (uint64_t step = 0; step < kSteps; ++step) {
    for (bool in_place : {false, true}) {
      std::vector<Bytes> inputs, outputs(world(), Bytes(bytes(count() * world()), 0xcd));
      for (int r = 0; r < world(); ++r) {
        inputs.push_back(Filled(count(), dtype(), r, step));
        if (in_place) {
          std::memcpy(outputs[r].data() + bytes(r * count()), inputs[r].data(), bytes(count()));
        }
      }
      for (int r = 0; r < world(); ++r) {
        const void* input = in_place ? outputs[r].data() + bytes(r * count()) : inputs[r].data();
        ASSERT_OK(
            group.comm(r).AllGather(input, outputs[r].data(), count(), dtype(), group.stream(r)));
      }
      ExpectAllOk(group.SyncAll());
      for (int r = 0; r < world(); ++r) {
        const Bytes expected =
            tp::Expected(CollectiveOp::kAllGather, r, world(), count(), dtype(), step);
        EXPECT_EQ(tp::Compare(outputs[r].data(), expected, dtype()), "")
            << "rank " << r << (in_place ? " in place" : " out of place");
      }
    }
  }
}

TEST_P(CollectiveTest, BroadcastFromEveryRoot) {
  Group group(world());
  for (int root = 0; root < world(); ++root) {
    const uint64_t step = 10 + root;
    std::vector<Bytes> data;
    for (int r = 0; r < world(); ++r) {
      // Non-roots start from other values, which must be overwritten.
      data.push_back(Filled(count(), dtype(), r, r == root ? step : step + 100));
    }
    for (int r = 0; r < world(); ++r) {
      ASSERT_OK(group.comm(r).Broadcast(data[r].data(), count(), dtype(), root, group.stream(r)));
    }
    ExpectAllOk(group.SyncAll());
    const Bytes expected =
        tp::Expected(CollectiveOp::kBroadcast, 0, world(), count(), dtype(), step, root);
    for (int r = 0; r < world(); ++r) {
      EXPECT_EQ(tp::Compare(data[r].data(), expected, dtype()), "")
          << "rank " << r << " root " << root;
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<CollectiveTest::ParamType>& info) {
  return absl::StrCat("world", std::get<0>(info.param), "_", DTypeName(std::get<1>(info.param)),
                      "_count", std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    WorldsDtypesOddCounts, CollectiveTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(size_t{1}, size_t{7}, size_t{1000003})),
    ParamName);

// ---------------------------------------------------------------------------------------
// Determinism, ordering, queueing.

TEST(LocalCommunicator, DeterministicAndTheDataWouldNoticeAnotherOrder) {
  constexpr int kWorld = 4;
  constexpr size_t kCount = 1000003;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // The test data is sensitive to how sums are formed: in fp32, summing in reverse rank
    // order changes many elements; in bf16, rounding after every addition (a ring passing
    // bf16 partial sums) does. Exact comparisons against the reference would catch either.
    size_t differing = 0;
    for (size_t i = 0; i < kCount; ++i) {
      const float other = dtype == DType::kF32 ? tp::ReverseOrderSum(kWorld, 0, i, dtype)
                                               : tp::RoundedEachStepSum(kWorld, 0, i, dtype);
      differing += tp::RankOrderSum(kWorld, 0, i, dtype) != other;
    }
    EXPECT_GT(differing, kCount / 100) << DTypeName(dtype);

    // Two runs on the same inputs (fresh groups, different thread timing) give the same
    // bytes on every rank.
    std::vector<Bytes> first;
    for (int run = 0; run < 2; ++run) {
      Group group(kWorld);
      std::vector<Bytes> data;
      for (int r = 0; r < kWorld; ++r) data.push_back(Filled(kCount, dtype, r, 0));
      for (int r = kWorld - 1; r >= 0; --r) {  // issue order across ranks does not matter
        ASSERT_OK(group.comm(r).AllReduce(data[r].data(), kCount, dtype, group.stream(r)));
      }
      ExpectAllOk(group.SyncAll());
      for (int r = 1; r < kWorld; ++r) EXPECT_EQ(data[r], data[0]) << "rank " << r;
      if (run == 0) first = data;
      EXPECT_EQ(data[0], first[0]) << "run " << run;
    }
  }
}

// Many collectives queued back to back on every rank before any sync, with one rank's
// stream held up: fast ranks run ahead into later rounds while slow ones finish earlier ones.
TEST(LocalCommunicator, QueuedCollectivesPairUpInOrder) {
  constexpr int kWorld = 3;
  constexpr size_t kCount = 1001;
  constexpr int kRounds = 40;
  Group group(kWorld);
  std::vector<std::vector<Bytes>> data(kWorld, std::vector<Bytes>(kRounds));
  std::vector<std::vector<Bytes>> gathered(kWorld, std::vector<Bytes>(kRounds));
  for (int r = 0; r < kWorld; ++r) {
    if (r == 1) {
      group.stream(r).EnqueueHost([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return absl::OkStatus();
      });
    }
    for (int round = 0; round < kRounds; ++round) {
      const DType dtype = round % 3 == 0 ? DType::kBF16 : DType::kF32;
      data[r][round] = Filled(kCount, dtype, r, round);
      if (round % 2 == 0) {
        ASSERT_OK(group.comm(r).AllReduce(data[r][round].data(), kCount, dtype, group.stream(r)));
      } else {
        gathered[r][round].resize(kCount * kWorld * DTypeBytes(dtype));
        ASSERT_OK(group.comm(r).AllGather(data[r][round].data(), gathered[r][round].data(), kCount,
                                          dtype, group.stream(r)));
      }
    }
  }
  ExpectAllOk(group.SyncAll());
  for (int r = 0; r < kWorld; ++r) {
    for (int round = 0; round < kRounds; ++round) {
      const DType dtype = round % 3 == 0 ? DType::kBF16 : DType::kF32;
      if (round % 2 == 0) {
        EXPECT_EQ(
            tp::Compare(data[r][round].data(),
                        tp::Expected(CollectiveOp::kAllReduce, r, kWorld, kCount, dtype, round),
                        dtype),
            "")
            << "rank " << r << " round " << round;
      } else {
        EXPECT_EQ(
            tp::Compare(gathered[r][round].data(),
                        tp::Expected(CollectiveOp::kAllGather, r, kWorld, kCount, dtype, round),
                        dtype),
            "")
            << "rank " << r << " round " << round;
      }
    }
  }
}

// Each zero-count collective is still a rendezvous: no rank's stream passes it before the
// last rank (rank 2, late on purpose) has reached it.
TEST(LocalCommunicator, ZeroCountCollectivesStillSynchronize) {
  constexpr int kWorld = 3;
  constexpr int kOps = 4;
  Group group(kWorld);
  std::atomic<bool> late_rank_arrived[kOps];
  std::atomic<bool> saw_late_rank[kOps][kWorld];
  for (int op = 0; op < kOps; ++op) {
    late_rank_arrived[op] = false;
    for (int r = 0; r < kWorld; ++r) saw_late_rank[op][r] = false;
  }
  for (int r = 0; r < kWorld; ++r) {
    Communicator& comm = group.comm(r);
    Stream& stream = group.stream(r);
    for (int op = 0; op < kOps; ++op) {
      if (r == kWorld - 1) {
        stream.EnqueueHost([&, op] {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          late_rank_arrived[op] = true;
          return absl::OkStatus();
        });
      }
      switch (op) {
        case 0:
          ASSERT_OK(comm.AllReduce(nullptr, 0, DType::kF32, stream));
          break;
        case 1:
          ASSERT_OK(comm.ReduceScatter(nullptr, nullptr, 0, DType::kBF16, stream));
          break;
        case 2:
          ASSERT_OK(comm.AllGather(nullptr, nullptr, 0, DType::kF32, stream));
          break;
        default:
          ASSERT_OK(comm.Broadcast(nullptr, 0, DType::kF32, 2, stream));
          break;
      }
      stream.EnqueueHost([&, op, r] {
        saw_late_rank[op][r] = late_rank_arrived[op].load();
        return absl::OkStatus();
      });
    }
  }
  ExpectAllOk(group.SyncAll());
  for (int op = 0; op < kOps; ++op) {
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(saw_late_rank[op][r])
          << "collective " << op << " let rank " << r << " through before rank 2 arrived";
    }
  }
}

TEST(LocalCommunicator, BarrierWaitsForEveryRank) {
  constexpr int kWorld = 4;
  Group group(kWorld);
  std::vector<std::atomic<bool>> before(kWorld);
  std::vector<std::atomic<int>> seen_after(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    before[r] = false;
    seen_after[r] = -1;
  }
  for (int r = 0; r < kWorld; ++r) {
    group.stream(r).EnqueueHost([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));
      before[r] = true;
      return absl::OkStatus();
    });
    ASSERT_OK(group.comm(r).Barrier(group.stream(r)));
    group.stream(r).EnqueueHost([&, r] {
      int count = 0;
      for (int other = 0; other < kWorld; ++other) count += before[other] ? 1 : 0;
      seen_after[r] = count;
      return absl::OkStatus();
    });
  }
  ExpectAllOk(group.SyncAll());
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(seen_after[r], kWorld) << "rank " << r;
}

// ---------------------------------------------------------------------------------------
// Failures: timeout, abort, disagreement, bad arguments.

TEST(LocalCommunicator, MissingRankTimesOutNamingOperationSequenceAndRank) {
  constexpr double kTimeout = 0.3;
  Group group(3, kTimeout);
  std::vector<Bytes> data;
  for (int r = 0; r < 3; ++r) data.push_back(Filled(7, DType::kF32, r, 0));
  // One collective that everyone joins, then rank 2 goes missing.
  for (int r = 0; r < 3; ++r) {
    ASSERT_OK(group.comm(r).Barrier(group.stream(r)));
  }
  ExpectAllOk(group.SyncAll());
  const auto start = Clock::now();
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK(group.comm(r).AllReduce(data[r].data(), 7, DType::kF32, group.stream(r)));
  }
  for (int r = 0; r < 2; ++r) {
    Status status = group.stream(r).Synchronize();
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                 AllOf(HasSubstr("all_reduce #1 (7 x fp32) timed out after 0.3 s"),
                                       HasSubstr("rank(s) 2 did not arrive (arrived: 0, 1)"))));
  }
  const double elapsed = SecondsSince(start);
  EXPECT_GE(elapsed, kTimeout * 0.9);
  EXPECT_LT(elapsed, kTimeout + 2.0);

  // The group stays failed: rank 2 arriving late fails at once with the first error.
  const auto late = Clock::now();
  ASSERT_OK(group.comm(2).AllReduce(data[2].data(), 7, DType::kF32, group.stream(2)));
  Status status = group.stream(2).Synchronize();
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank(s) 2 did not arrive")));
  EXPECT_LT(SecondsSince(late), 0.2);
  // Input buffers of the failed collective are untouched.
  EXPECT_EQ(data[0], Filled(7, DType::kF32, 0, 0));
}

TEST(LocalCommunicator, AbortFailsWaitingRanksFastNamingRankAndReason) {
  Group group(3, /*timeout_s=*/60.0);
  std::vector<Bytes> data;
  for (int r = 0; r < 3; ++r) data.push_back(Filled(1000, DType::kBF16, r, 0));
  const auto start = Clock::now();
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK(group.comm(r).AllReduce(data[r].data(), 1000, DType::kBF16, group.stream(r)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  group.comm(2).Abort("out of memory in step 3");
  for (int r = 0; r < 2; ++r) {
    Status status = group.stream(r).Synchronize();
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted,
                                 HasSubstr("aborted by rank 2: out of memory in step 3")));
  }
  EXPECT_LT(SecondsSince(start), 5.0);
  // Later collectives fail at once on every rank, the aborting one included.
  for (int r = 0; r < 3; ++r) {
    ASSERT_OK(group.comm(r).Barrier(group.stream(r)));
    Status status = group.stream(r).Synchronize();
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted, HasSubstr("aborted by rank 2")));
  }
}

TEST(LocalCommunicator, RanksThatDisagreeFailNamingBothCalls) {
  Group group(2);
  Bytes a = Filled(10, DType::kF32, 0, 0), b = Filled(11, DType::kF32, 1, 0);
  ASSERT_OK(group.comm(0).AllReduce(a.data(), 10, DType::kF32, group.stream(0)));
  ASSERT_OK(group.comm(1).AllReduce(b.data(), 11, DType::kF32, group.stream(1)));
  for (const Status& status : group.SyncAll()) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr("ranks disagree on collective #0"),
                                       HasSubstr("all_reduce #0 (10 x fp32)"),
                                       HasSubstr("all_reduce #0 (11 x fp32)"))));
  }
}

// Collectives of one rank on two unordered streams would pair the wrong rounds: the first
// one that runs out of order fails the whole group.
TEST(LocalCommunicator, CollectivesRunningOutOfOrderFailTheGroup) {
  Group group(2);
  auto device = CreateCpuDevice(CpuDeviceOptions{});
  ASSERT_OK_AND_ASSIGN(auto other_stream, device->CreateStream("other"));
  Bytes data = Filled(5, DType::kF32, 0, 0), peer = Filled(5, DType::kF32, 1, 0);
  group.stream(0).EnqueueHost([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return absl::OkStatus();
  });
  ASSERT_OK(group.comm(0).AllReduce(data.data(), 5, DType::kF32, group.stream(0)));
  ASSERT_OK(group.comm(0).Barrier(*other_stream));  // #1 runs before #0
  Status status = other_stream->Synchronize();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("local rank 0: barrier #1 ran before #0")));
  ASSERT_OK(group.comm(1).AllReduce(peer.data(), 5, DType::kF32, group.stream(1)));
  for (const Status& later : group.SyncAll()) {
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
  }
}

TEST(LocalCommunicator, BadArgumentsAreRejectedBeforeAnythingIsEnqueued) {
  Group group(2);
  Bytes buffer(64 * 4);
  Communicator& comm = group.comm(1);
  Status status = comm.Broadcast(buffer.data(), 4, DType::kF32, 2, group.stream(1));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("root 2 is not a rank of a group of 2")));
  status = comm.AllReduce(nullptr, 4, DType::kF32, group.stream(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // Reduce-scatter output overlapping the input elsewhere than input + rank * count.
  status = comm.ReduceScatter(buffer.data(), buffer.data() + 4, 8, DType::kF32, group.stream(1));
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not the in-place position")));
  // All-gather input at output + 0 * count on rank 1 is not in place.
  status = comm.AllGather(buffer.data(), buffer.data(), 8, DType::kF32, group.stream(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // None of the rejected calls took a sequence number: a valid pair still matches.
  for (int r = 0; r < 2; ++r) ASSERT_OK(group.comm(r).Barrier(group.stream(r)));
  ExpectAllOk(group.SyncAll());
}

TEST(LocalCommunicator, CreateRejectsBadWorldSizeAndTimeout) {
  EXPECT_EQ(CreateLocalGroup(0, LocalGroupOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  LocalGroupOptions options;
  options.timeout_s = 0;
  EXPECT_EQ(CreateLocalGroup(2, options).status().code(), absl::StatusCode::kInvalidArgument);
  auto group = CreateLocalGroup(3, LocalGroupOptions{});
  ASSERT_OK(group);
  EXPECT_EQ((*group)[2]->Describe(), "local rank 2 of 3");
  EXPECT_EQ((*group)[2]->rank(), 2);
  EXPECT_EQ((*group)[2]->world_size(), 3);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Ranks as threads share one node: each is local rank r of world_size.
TEST(LocalCommunicator, RanksAsThreadsShareOneNode) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateLocalGroup(3, LocalGroupOptions{}));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group[r]->local_rank(), r);
    EXPECT_EQ(group[r]->local_size(), 3);
  }
}

// The body nccl_communicator_test runs on CUDA: a collective queued behind work that never
// finishes fails after the timeout, naming itself.
TEST(LocalCommunicator, CollectiveBehindStuckWorkFailsNamingItself) {
  Group group(1, /*timeout_s=*/1.0);
  ExpectCollectiveBehindStuckWorkFails(group.device(), group.comm(0), group.stream(0), 1.0);
}

}  // namespace
}  // namespace strata
