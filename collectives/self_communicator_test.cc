// The self communicator against the local communicator of one rank (the reference every
// implementation matches): each collective, in place and out of place, fp32 and bf16,
// odd counts and arbitrary bit patterns, bit for bit; argument errors as the contract says.
#include "collectives/self_communicator.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/local_communicator.h"
#include "device/cpu_device.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

class SelfCommunicatorTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    device_ = CreateCpuDevice({});
    ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream("comm"));
    ASSERT_OK_AND_ASSIGN(auto group, CreateLocalGroup(1, LocalGroupOptions{}));
    local_ = std::move(group[0]);
    self_ = CreateSelfCommunicator(*device_);
  }

  // Runs `op` on a copy of `input` (and a separate output where not in place) with `comm`;
  // returns the output bytes.
  template <typename Op>
  std::vector<uint8_t> Run(Communicator& comm, const std::vector<uint8_t>& input, Op op) {
    std::vector<uint8_t> in = input;
    std::vector<uint8_t> out(input.size(), 0xAB);
    EXPECT_OK(op(comm, in.data(), out.data()));
    EXPECT_OK(stream_->Synchronize());
    out.insert(out.end(), in.begin(), in.end());  // the input too (in-place results)
    return out;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> self_;
};

TEST_P(SelfCommunicatorTest, EveryCollectiveEqualsTheLocalOneOfOneRank) {
  const DType dtype = GetParam();
  Stream& s = *stream_;
  for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
    const std::vector<uint8_t> input = RandomBytes(count * DTypeBytes(dtype), count + 7);
    struct Case {
      const char* what;
      std::function<Status(Communicator&, void*, void*)> op;
    };
    const std::vector<Case> cases = {
        {"all_reduce", [&](Communicator& c, void* in, void*) { return c.AllReduce(in, count, dtype, s); }},
        {"reduce_scatter out of place",
         [&](Communicator& c, void* in, void* out) { return c.ReduceScatter(in, out, count, dtype, s); }},
        {"reduce_scatter in place",
         [&](Communicator& c, void* in, void*) { return c.ReduceScatter(in, in, count, dtype, s); }},
        {"all_gather out of place",
         [&](Communicator& c, void* in, void* out) { return c.AllGather(in, out, count, dtype, s); }},
        {"all_gather in place",
         [&](Communicator& c, void* in, void*) { return c.AllGather(in, in, count, dtype, s); }},
        {"broadcast", [&](Communicator& c, void* in, void*) { return c.Broadcast(in, count, dtype, 0, s); }},
        {"barrier", [&](Communicator& c, void*, void*) { return c.Barrier(s); }},
    };
    for (const Case& c : cases) {
      EXPECT_EQ(Run(*self_, input, c.op), Run(*local_, input, c.op))
          << c.what << ", count " << count << ", " << DTypeName(dtype);
    }
  }
}

TEST_P(SelfCommunicatorTest, BadArgumentsAreRefusedAtOnce) {
  std::vector<float> buffer(8);
  EXPECT_THAT(self_->AllReduce(nullptr, 4, GetParam(), *stream_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(self_->Broadcast(buffer.data(), 4, GetParam(), 1, *stream_),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("root")));
  EXPECT_EQ(self_->world_size(), 1);
  EXPECT_EQ(self_->rank(), 0);
  EXPECT_THAT(self_->Describe(), ::testing::HasSubstr("self rank 0 of 1"));
}

INSTANTIATE_TEST_SUITE_P(DTypes, SelfCommunicatorTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace strata
