// The NCCL communicator on the GPUs of this machine, nccl-tests style: ranks are threads
// (one GPU each, bootstrapped through a local group), every rank fills its buffers from
// (rank, step, index), and results are compared byte for byte with the rank-order
// reference of test_pattern.h (fixed_order; NCCL's own reductions within a tolerance from
// 3 ranks up), for fp32 and bf16, counts 1, 7 and 1000003, in place and out of place, on
// every world size from 1 to min(4, GPUs). Also: a missing rank times out and aborts, Abort,
// a non-CUDA stream or device is refused.
// Without a usable GPU (no driver, none visible, or built without CUDA) the GPU tests skip
// with the reason; the argument checks that need no GPU run everywhere.
#include "collectives/nccl_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/local_communicator.h"
#include "collectives/stuck_stream_check.h"
#include "collectives/test_pattern.h"
#include "device/cpu_device.h"
#include "device/cuda/cuda_device.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

namespace tp = testing_pattern;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

// The reason no GPU test can run here, or "" when one can.
std::string NoGpuReason() {
  if (!BuiltWithNccl()) return "no usable GPU: strata was built without CUDA, so without NCCL";
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return absl::StrCat("no usable GPU: ", count.status().ToString());
  if (*count == 0) return "no usable GPU: cudaGetDeviceCount found 0 devices";
  return "";
}

int MaxWorld() {
  StatusOr<int> count = CudaDeviceCount();
  return count.ok() ? std::min(4, *count) : 0;
}

// Runs fn(rank) on `world` threads at once and joins them.
template <typename Fn>
void OnEveryRank(int world, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& thread : threads) thread.join();
}

// `world` NCCL ranks as threads of this process, GPU r for rank r.
class World {
 public:
  World(int world, const NcclOptions& options) : devices_(world), streams_(world), comms_(world) {
    auto bootstrap = CreateLocalGroup(world, LocalGroupOptions{});
    EXPECT_OK(bootstrap);
    if (!bootstrap.ok()) return;
    std::vector<Status> statuses(world);
    OnEveryRank(world, [&](int r) {
      CudaDeviceOptions device_options;
      device_options.local_rank = r;
      device_options.device_memory_bytes = 4ull << 30;
      auto device = CreateCudaDevice(device_options);
      if (!device.ok()) {
        statuses[r] = device.status();
        return;
      }
      devices_[r] = std::move(*device);
      auto stream = devices_[r]->CreateStream(absl::StrCat("comm ", r));
      if (!stream.ok()) {
        statuses[r] = stream.status();
        return;
      }
      streams_[r] = std::move(*stream);
      auto comm = CreateNcclCommunicator(*devices_[r], *(*bootstrap)[r], options);
      if (!comm.ok()) {
        statuses[r] = comm.status();
        return;
      }
      comms_[r] = std::move(*comm);
    });
    for (int r = 0; r < world; ++r) EXPECT_OK(statuses[r]) << r;
  }

  ~World() {
    // Communicators first (they wait for their collectives), in parallel: NCCL's finalize
    // may need every rank.
    OnEveryRank(size(), [&](int r) { comms_[r].reset(); });
  }

  bool ok() const {
    for (const auto& comm : comms_) {
      if (comm == nullptr) return false;
    }
    return true;
  }
  int size() const { return static_cast<int>(comms_.size()); }
  Device& device(int r) { return *devices_[r]; }
  Stream& stream(int r) { return *streams_[r]; }
  Communicator& comm(int r) { return *comms_[r]; }

  // A device buffer holding `bytes`.
  Buffer Upload(int r, const Bytes& bytes) {
    auto buffer = devices_[r]->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                        std::max<size_t>(bytes.size(), 1), "test data");
    EXPECT_OK(buffer);
    if (!buffer.ok()) return Buffer();
    EXPECT_OK(devices_[r]->CopyAsync(buffer->data(), bytes.data(), bytes.size(), stream(r)));
    EXPECT_OK(stream(r).Synchronize());
    return std::move(*buffer);
  }

  Bytes Download(int r, const void* device_data, size_t bytes) {
    Bytes host(bytes);
    EXPECT_OK(devices_[r]->CopyAsync(host.data(), device_data, bytes, stream(r)));
    Status status = stream(r).Synchronize();
    EXPECT_OK(status);
    return host;
  }

 private:
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

Bytes Filled(size_t count, DType dtype, int rank, uint64_t step) {
  Bytes bytes(count * DTypeBytes(dtype));
  tp::Fill(bytes.data(), count, dtype, rank, step);
  return bytes;
}

float Get(const Bytes& bytes, size_t i, DType dtype) {
  if (dtype == DType::kF32) {
    float value;
    std::memcpy(&value, bytes.data() + 4 * i, 4);
    return value;
  }
  bf16 value;
  std::memcpy(&value, bytes.data() + 2 * i, 2);
  return ToFloat(value);
}

// Exact bytes for fixed-order reductions (and any reduction of at most 2 ranks: one
// addition is the same in any order); NCCL's own order from 3 ranks on: within a few
// roundings of the sum of magnitudes.
std::string CompareSum(const Bytes& got, const Bytes& expected, DType dtype, bool exact, int world,
                       uint64_t step, size_t first_index) {
  if (exact) return tp::Compare(got.data(), expected, dtype);
  const float eps = dtype == DType::kF32 ? 1.2e-7f : 7.9e-3f;
  const size_t count = expected.size() / DTypeBytes(dtype);
  for (size_t i = 0; i < count; ++i) {
    float magnitude = 0;
    for (int r = 0; r < world; ++r)
      magnitude += std::fabs(tp::Value(r, step, first_index + i, dtype));
    const float difference = std::fabs(Get(got, i, dtype) - Get(expected, i, dtype));
    if (difference > 2 * world * eps * magnitude) {
      return absl::StrCat("[", i, "] got ", Get(got, i, dtype), " expected ",
                          Get(expected, i, dtype));
    }
  }
  return "";
}

class NcclCollectiveTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const std::string reason = NoGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  bool fixed_order() const { return GetParam(); }
};

TEST_P(NcclCollectiveTest, EveryCollectiveOnEveryWorldSize) {
  NcclOptions options;
  options.timeout_s = 60;
  options.fixed_order = fixed_order();
  options.max_scratch_bytes = 1 << 20;  // reductions of 1000003 elements run in segments
  for (int world = 1; world <= MaxWorld(); ++world) {
    World ranks(world, options);
    ASSERT_TRUE(ranks.ok());
    uint64_t step = 0;
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}}) {
        ++step;
        const size_t e = DTypeBytes(dtype);
        const bool exact = fixed_order() || world <= 2;
        const std::string what =
            absl::StrCat("world ", world, " ", DTypeName(dtype), " count ", count,
                         fixed_order() ? " fixed order" : " nccl order");
        OnEveryRank(world, [&](int r) {
          // all-reduce, in place
          Buffer data = ranks.Upload(r, Filled(count, dtype, r, step));
          ASSERT_OK(ranks.comm(r).AllReduce(data.data(), count, dtype, ranks.stream(r)));
          EXPECT_EQ(CompareSum(ranks.Download(r, data.data(), count * e),
                               tp::Expected(CollectiveOp::kAllReduce, r, world, count, dtype, step),
                               dtype, exact, world, step, 0),
                    "")
              << "all_reduce " << what << " rank " << r;

          for (bool in_place : {false, true}) {
            const std::string how = in_place ? " in place " : " out of place ";
            // reduce-scatter
            Buffer input = ranks.Upload(r, Filled(count * world, dtype, r, step));
            Buffer output = ranks.Upload(r, Bytes(count * e, 0xab));
            void* out = in_place ? input.as<char>() + r * count * e : output.data();
            ASSERT_OK(
                ranks.comm(r).ReduceScatter(input.data(), out, count, dtype, ranks.stream(r)));
            EXPECT_EQ(
                CompareSum(ranks.Download(r, out, count * e),
                           tp::Expected(CollectiveOp::kReduceScatter, r, world, count, dtype, step),
                           dtype, exact, world, step, r * count),
                "")
                << "reduce_scatter" << how << what << " rank " << r;

            // all-gather
            Bytes gathered_init(count * world * e, 0xcd);
            Bytes mine = Filled(count, dtype, r, step);
            if (in_place)
              std::memcpy(gathered_init.data() + r * count * e, mine.data(), mine.size());
            Buffer gathered = ranks.Upload(r, gathered_init);
            Buffer mine_device = ranks.Upload(r, mine);
            const void* in = in_place ? gathered.as<char>() + r * count * e : mine_device.data();
            ASSERT_OK(ranks.comm(r).AllGather(in, gathered.data(), count, dtype, ranks.stream(r)));
            EXPECT_EQ(
                tp::Compare(ranks.Download(r, gathered.data(), count * world * e).data(),
                            tp::Expected(CollectiveOp::kAllGather, r, world, count, dtype, step),
                            dtype),
                "")
                << "all_gather" << how << what << " rank " << r;
          }

          // broadcast from the last rank, then a barrier
          const int root = world - 1;
          Buffer broadcast =
              ranks.Upload(r, Filled(count, dtype, r, r == root ? step : step + 1000));
          ASSERT_OK(ranks.comm(r).Broadcast(broadcast.data(), count, dtype, root, ranks.stream(r)));
          EXPECT_EQ(tp::Compare(
                        ranks.Download(r, broadcast.data(), count * e).data(),
                        tp::Expected(CollectiveOp::kBroadcast, r, world, count, dtype, step, root),
                        dtype),
                    "")
              << "broadcast " << what << " rank " << r;
          ASSERT_OK(ranks.comm(r).Barrier(ranks.stream(r)));
          EXPECT_OK(ranks.stream(r).Synchronize());
        });
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FixedAndNcclOrder, NcclCollectiveTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("fixed_order")
                                             : std::string("nccl_order");
                         });

TEST(NcclCommunicator, MissingRankTimesOutAndAborts) {
  const std::string reason = NoGpuReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  if (MaxWorld() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << MaxWorld();
  NcclOptions options;
  options.timeout_s = 2;
  World ranks(2, options);
  ASSERT_TRUE(ranks.ok());
  Buffer data = ranks.Upload(0, Filled(1000, DType::kF32, 0, 0));
  const auto start = Clock::now();
  // Rank 1 never issues its all-reduce.
  ASSERT_OK(ranks.comm(0).AllReduce(data.data(), 1000, DType::kF32, ranks.stream(0)));
  Status status = ranks.stream(0).Synchronize();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  // Caught by the watchdog ("did not complete within 2 s of starting on the GPU") or, when
  // NCCL's lazy peer connection is what waits, by the enqueue ("did not finish within 2 s").
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("all_reduce #0 (1000 x fp32)"), HasSubstr("within 2 s"))));
  EXPECT_LT(elapsed, 15.0);
  // The communicator stays failed.
  ASSERT_OK(ranks.comm(0).Barrier(ranks.stream(0)));
  EXPECT_EQ(ranks.stream(0).Synchronize().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclCommunicator, AbortFailsLaterCollectivesAndStreamsMustBeCuda) {
  const std::string reason = NoGpuReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  World ranks(1, NcclOptions{});
  ASSERT_TRUE(ranks.ok());
  auto cpu_device = CreateCpuDevice(CpuDeviceOptions{});
  ASSERT_OK_AND_ASSIGN(auto cpu_stream, cpu_device->CreateStream("cpu"));
  Status status = ranks.comm(0).Barrier(*cpu_stream);
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a CUDA stream")));

  ranks.comm(0).Abort("out of memory in step 3");
  ASSERT_OK(ranks.comm(0).Barrier(ranks.stream(0)));
  status = ranks.stream(0).Synchronize();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted,
                               HasSubstr("aborted the group: out of memory in step 3")));
}

// The body local_communicator_test runs on the CPU device.
TEST(NcclCommunicator, CollectiveBehindStuckWorkFailsNamingItself) {
  const std::string reason = NoGpuReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  NcclOptions options;
  options.timeout_s = 1;
  World ranks(1, options);
  ASSERT_TRUE(ranks.ok());
  ExpectCollectiveBehindStuckWorkFails(ranks.device(0), ranks.comm(0), ranks.stream(0), 1.0);
}

// Runs everywhere: no GPU call is made before the device is checked.
TEST(NcclCommunicator, RefusesANonCudaDevice) {
  auto cpu_device = CreateCpuDevice(CpuDeviceOptions{});
  auto bootstrap = CreateLocalGroup(1, LocalGroupOptions{});
  ASSERT_OK(bootstrap);
  auto comm = CreateNcclCommunicator(*cpu_device, *(*bootstrap)[0], NcclOptions{});
  ASSERT_FALSE(comm.ok());
  if (BuiltWithNccl()) {
    EXPECT_THAT(comm,
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a CUDA device")));
  } else {
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable) << comm.status();
  }
  NcclOptions bad;
  bad.timeout_s = -1;
  EXPECT_EQ(CreateNcclCommunicator(*cpu_device, *(*bootstrap)[0], bad).status().code(),
            BuiltWithNccl() ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata
