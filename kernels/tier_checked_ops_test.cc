// WithTierChecks on the CPU device: kernels of one tier run on their tier's buffers and on
// memory the caller owns, and refuse a buffer of the other tier before anything is
// enqueued, naming the op, the argument and its tier (also inside a buffer, not only at
// its start); Dropout checks both its output and its input.
#include "kernels/tier_checked_ops.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/cpu_device.h"
#include "core/testing/status_matchers.h"
#include "kernels/cpu/cpu_ops.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

class TierCheckedOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = CreateCpuDevice({});
    ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream("compute"));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Ops> device_kernels, CreateCpuOps(DType::kF32, 1));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Ops> host_kernels, CreateCpuOps(DType::kF32, 1));
    device_ops_ = WithTierChecks(std::move(device_kernels), *device_, Tier::kDevice);
    host_ops_ = WithTierChecks(std::move(host_kernels), *device_, Tier::kHost);
    ASSERT_OK_AND_ASSIGN(on_device_, device_->Allocate(Tier::kDevice, StateKind::kGrads,
                                                       64 * sizeof(float), "device grads"));
    ASSERT_OK_AND_ASSIGN(on_host_, device_->Allocate(Tier::kHost, StateKind::kGrads,
                                                     64 * sizeof(float), "host grads"));
    ASSERT_OK(device_->MemsetAsync(on_device_.data(), 0, on_device_.bytes(), *stream_));
    ASSERT_OK(device_->MemsetAsync(on_host_.data(), 0, on_host_.bytes(), *stream_));
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Ops> device_ops_, host_ops_;
  Buffer on_device_, on_host_;
};

TEST_F(TierCheckedOpsTest, KernelsRunOnTheirTierAndOnTheCallersMemory) {
  std::vector<float> own(64, 1.0f);
  ASSERT_OK(device_ops_->Accumulate(*stream_, on_device_.data(), own.data(), 64));
  ASSERT_OK(host_ops_->AccumulateToFloat(*stream_, on_host_.as<float>(), own.data(), 64));
  ASSERT_OK(stream_->Synchronize());
  EXPECT_EQ(on_device_.as<float>()[63], 1.0f);
  EXPECT_EQ(on_host_.as<float>()[0], 1.0f);
}

TEST_F(TierCheckedOpsTest, ABufferOfTheOtherTierIsRefusedNamingIt) {
  EXPECT_THAT(device_ops_->Accumulate(*stream_, on_device_.data(), on_host_.data(), 64),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Accumulate runs on the device tier, but src is in the host "
                                 "tier")));
  EXPECT_THAT(device_ops_->AddScaledColumns(*stream_, on_device_.data(), 8, 2, on_host_.data(), 4,
                                            5, 0.5f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AddScaledColumns runs on the device tier, but src is in the "
                                 "host tier")));
  EXPECT_THAT(device_ops_->ScaledColumns(*stream_, on_host_.data(), on_device_.data(), 8, 2, 4, 5,
                                         0.5f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ScaledColumns runs on the device tier, but dst is in the host "
                                 "tier")));
  EXPECT_THAT(device_ops_->Dropout(*stream_, on_device_.data(), on_host_.data(), 4, 5, 2, 0, 0.5f,
                                   7, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Dropout runs on the device tier, but in is in the host tier")));
  EXPECT_THAT(device_ops_->Dropout(*stream_, on_host_.as<float>() + 8, on_device_.data(), 4, 5, 2,
                                   0, 0.5f, 7, true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Dropout runs on the device tier, but out is in the host tier")));
  // Inside a buffer, and several arguments at once.
  EXPECT_THAT(host_ops_->AdamW(*stream_, nullptr, on_device_.as<float>() + 3,
                               on_host_.as<float>(), on_host_.as<float>(),
                               on_device_.as<float>() + 10, 8, AdamParams{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamW runs on the host tier, but master is in the device "
                                 "tier, v is in the device tier")));
  EXPECT_THAT(host_ops_->AdamW8bit(*stream_, nullptr, on_host_.as<float>(), on_host_.as<float>(),
                                   on_device_.as<uint8_t>(), on_host_.as<float>(),
                                   on_host_.as<uint8_t>(), on_host_.as<float>(), 8, AdamParams{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamW8bit runs on the host tier, but m_codes is in the device "
                                 "tier")));
  ASSERT_OK(stream_->Synchronize());
  EXPECT_EQ(on_device_.as<float>()[3], 0.0f) << "nothing may run after a refusal";
}

TEST_F(TierCheckedOpsTest, LoraOpsRunOnTheirTier) {
  std::vector<float> own(20, 2.0f);  // N x n = 4 x 5
  ASSERT_OK(device_ops_->AddScaledColumns(*stream_, on_device_.data(), 8, 2, own.data(), 4, 5,
                                          0.5f));
  ASSERT_OK(device_ops_->ScaledColumns(*stream_, on_device_.as<float>() + 40, on_device_.data(), 8,
                                       2, 4, 5, 2.0f));
  ASSERT_OK(stream_->Synchronize());
  EXPECT_EQ(on_device_.as<float>()[1], 0.0f);
  EXPECT_EQ(on_device_.as<float>()[2], 1.0f);   // row 0, column 2: 0 + 0.5 * 2
  EXPECT_EQ(on_device_.as<float>()[30], 1.0f);  // row 3, column 6
  EXPECT_EQ(on_device_.as<float>()[31], 0.0f);
  EXPECT_EQ(on_device_.as<float>()[40], 2.0f);  // 2 * row 0, column 2
}

TEST_F(TierCheckedOpsTest, DropoutRunsOnItsTier) {
  std::vector<float> own(20, 3.0f);  // N x C = 4 x 5
  // p = 0: every element kept, divided by 1 - p = 1.
  ASSERT_OK(
      device_ops_->Dropout(*stream_, on_device_.data(), own.data(), 4, 5, 2, 0, 0.0f, 7, false));
  ASSERT_OK(
      host_ops_->Dropout(*stream_, on_host_.data(), on_host_.data(), 4, 5, 2, 0, 0.5f, 7, true));
  ASSERT_OK(stream_->Synchronize());
  EXPECT_EQ(on_device_.as<float>()[0], 3.0f);
  EXPECT_EQ(on_device_.as<float>()[19], 3.0f);
  EXPECT_EQ(on_device_.as<float>()[20], 0.0f);
}

TEST_F(TierCheckedOpsTest, DequantizationChecksEveryArrayOfThePiece) {
  // An NF4 piece of 64 values whose offset sits in the host tier: refused, naming it.
  uint8_t* piece = static_cast<uint8_t*>(on_device_.data());
  EXPECT_THAT(device_ops_->DequantizeNf4(*stream_, on_device_.as<float>() + 32, piece, piece + 32,
                                         on_device_.as<float>() + 12, on_host_.as<float>(), 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DequantizeNf4 runs on the device tier, but offset is in the "
                                 "host tier")));
  EXPECT_THAT(
      device_ops_->DequantizeInt8(*stream_, on_host_.data(), reinterpret_cast<const int8_t*>(piece),
                                  on_device_.as<float>() + 16, 16),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("DequantizeInt8 runs on the device tier, but out is in the host "
                         "tier")));
  EXPECT_THAT(device_ops_->WidenBf16(*stream_, on_device_.data(),
                                     static_cast<const bf16*>(on_host_.data()), 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("WidenBf16 runs on the device tier, but in is in the host "
                                 "tier")));
  // On the device tier: int8 codes of 2 (bytes 0..15), absmax 127 at float 16: out = 2.
  ASSERT_OK(device_->MemsetAsync(on_device_.data(), 2, 16, *stream_));
  ASSERT_OK(stream_->Synchronize());
  on_device_.as<float>()[16] = 127.0f;
  ASSERT_OK(device_ops_->DequantizeInt8(*stream_, on_device_.as<float>() + 32,
                                        reinterpret_cast<const int8_t*>(piece),
                                        on_device_.as<float>() + 16, 16));
  ASSERT_OK(stream_->Synchronize());
  EXPECT_EQ(on_device_.as<float>()[32], 2.0f);
  EXPECT_EQ(on_device_.as<float>()[47], 2.0f);
  EXPECT_EQ(on_device_.as<float>()[48], 0.0f);
}

TEST_F(TierCheckedOpsTest, AFreedBufferIsNoLongerATier) {
  void* freed = on_host_.data();
  on_host_.Reset();
  EXPECT_EQ(device_->TierOf(freed), std::nullopt);
  EXPECT_EQ(device_->TierOf(on_device_.as<char>() + 5), Tier::kDevice);
}

}  // namespace
}  // namespace strata
