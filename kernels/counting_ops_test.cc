// CountingOps: known shapes give the counts of counting_ops.h exactly (matmul, attention,
// AdamW, elementwise bytes in fp32 and bf16); every op runs on fake, never-dereferenced
// pointers without touching the stream; Reset zeroes; counting is exact under concurrent
// calls; and a bad argument is refused, uncounted, with the same status as the CPU ops.
#include "kernels/counting_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/testing/status_matchers.h"
#include "kernels/cpu/cpu_ops.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

// A stream that runs nothing and counts what is enqueued on it: a dry run must enqueue nothing.
class RecordingStream : public Stream {
 public:
  void EnqueueHost(std::function<Status()>) override { ++enqueued; }
  Status Synchronize() override { return absl::OkStatus(); }
  const std::string& name() const override { return name_; }
  int enqueued = 0;

 private:
  std::string name_ = "recording";
};

// Addresses in the never-mapped first pages: any read or write through them would crash.
void* Fake(uintptr_t address) { return reinterpret_cast<void*>(address); }
float* FakeFloat(uintptr_t address) { return reinterpret_cast<float*>(address); }
int32_t* FakeTokens(uintptr_t address) { return reinterpret_cast<int32_t*>(address); }
uint8_t* FakeBytes(uintptr_t address) { return reinterpret_cast<uint8_t*>(address); }

class CountingOpsTest : public ::testing::Test {
 protected:
  RecordingStream stream_;
  std::unique_ptr<CountingOps> f32_ = MakeCountingOps(DType::kF32);
  std::unique_ptr<CountingOps> bf16_ = MakeCountingOps(DType::kBF16);
};

TEST_F(CountingOpsTest, MatmulForwardCounts2NCOC) {
  ASSERT_OK(f32_->MatmulForward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), Fake(0x4000), 4,
                                8, 16));
  const OpCounts counts = f32_->counts();
  EXPECT_EQ(counts.matmul_flops, 1024);  // 2 * 4 * 8 * 16
  EXPECT_EQ(counts.attention_flops, 0);
  EXPECT_EQ(counts.adam_elements, 0);
  EXPECT_EQ(counts.elementwise_bytes, 0);
  EXPECT_EQ(counts.calls, 1u);
  EXPECT_EQ(f32_->dtype(), DType::kF32);
  EXPECT_EQ(bf16_->dtype(), DType::kBF16);
}

TEST_F(CountingOpsTest, MatmulBackwardCountsOnlyTheGradientsAskedFor) {
  auto backward = [&](void* dinp, void* dweight, void* dbias) {
    f32_->Reset();
    EXPECT_OK(f32_->MatmulBackward(stream_, dinp, dweight, dbias, Fake(0x4000), Fake(0x5000),
                                   Fake(0x6000), 4, 8, 16));
    return f32_->counts().matmul_flops;
  };
  EXPECT_EQ(backward(Fake(0x1000), Fake(0x2000), Fake(0x3000)), 1024 + 1024 + 4 * 16);
  EXPECT_EQ(backward(Fake(0x1000), Fake(0x2000), nullptr), 2048);
  EXPECT_EQ(backward(Fake(0x1000), nullptr, nullptr), 1024);  // frozen weight: no dweight GEMM
  EXPECT_EQ(backward(nullptr, Fake(0x2000), Fake(0x3000)), 1024 + 64);
  EXPECT_EQ(backward(nullptr, nullptr, nullptr), 0);
  EXPECT_EQ(f32_->counts().calls, 1u);  // a call that computes nothing is still a call
}

// The shapes a plan times: one entry per GEMM of a MatmulBackward (dinp, dweight) and per
// attention call, counted per call.
TEST_F(CountingOpsTest, ShapesAreRecordedPerGemmAndCall) {
  ASSERT_OK(f32_->MatmulForward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), nullptr, 4,
                                8, 16));
  ASSERT_OK(f32_->MatmulForward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), nullptr, 4,
                                8, 16));
  ASSERT_OK(f32_->MatmulBackward(stream_, Fake(0x1000), nullptr, nullptr, Fake(0x4000),
                                 Fake(0x5000), Fake(0x6000), 4, 8, 16));
  ASSERT_OK(f32_->MatmulBackward(stream_, Fake(0x1000), Fake(0x2000), nullptr, Fake(0x4000),
                                 Fake(0x5000), Fake(0x6000), 2, 3, 5));
  ASSERT_OK(f32_->AttentionBackward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000),
                                    Fake(0x4000), FakeFloat(0x5000), 2, 4, 8, 2, 1));
  const auto shapes = f32_->counts().shapes;
  using S = std::array<int, 6>;
  EXPECT_EQ(shapes.size(), 5u);
  EXPECT_EQ(shapes.at(S{OpCounts::kMatmulForward, 4, 8, 16, 0, 0}), 2);
  EXPECT_EQ(shapes.at(S{OpCounts::kMatmulDinp, 4, 8, 16, 0, 0}), 1);
  EXPECT_EQ(shapes.at(S{OpCounts::kMatmulDinp, 2, 3, 5, 0, 0}), 1);
  EXPECT_EQ(shapes.at(S{OpCounts::kMatmulDweight, 2, 3, 5, 0, 0}), 1);
  EXPECT_EQ(shapes.at(S{OpCounts::kAttentionBackward, 2, 4, 8, 2, 1}), 1);
  f32_->Reset();
  EXPECT_TRUE(f32_->counts().shapes.empty());
}

TEST_F(CountingOpsTest, AttentionCountsTheCausalPairs) {
  // B=2, T=4, C=8 in NH=2 heads of hs=4: each (sequence, head) has 1+2+3+4 = 10 causal
  // pairs of 4*hs = 16 flops, so 2 * 2 * 10 * 16 = 640; GQA (NKV=1) does not change it.
  ASSERT_OK(f32_->AttentionForward(stream_, Fake(0x1000), FakeFloat(0x2000), Fake(0x3000), 2, 4, 8,
                                   2, 1));
  EXPECT_EQ(f32_->counts().attention_flops, 640);
  ASSERT_OK(f32_->AttentionBackward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), Fake(0x4000),
                                    FakeFloat(0x5000), 2, 4, 8, 2, 2));
  EXPECT_EQ(f32_->counts().attention_flops, 640 + 1600);  // backward 2.5x
  // Decode: one query over T=4 keys in 2 heads of hs=4: 4 * 2 * 4 * 4 = 128, the forward's
  // last row for one sequence.
  f32_->Reset();
  ASSERT_OK(f32_->AttentionDecode(stream_, Fake(0x1000), Fake(0x2000), 4, 8, 2, 1));
  EXPECT_EQ(f32_->counts().attention_flops, 128);
  EXPECT_EQ(f32_->counts().matmul_flops, 0);
  EXPECT_EQ(f32_->counts().elementwise_bytes, 0);
}

TEST_F(CountingOpsTest, AdamWCountsTheElementsStepped) {
  AdamParams hp;
  hp.step = 3;
  ASSERT_OK(f32_->AdamW(stream_, Fake(0x1000), FakeFloat(0x2000), FakeFloat(0x3000),
                        FakeFloat(0x4000), FakeFloat(0x5000), 1000, hp));
  ASSERT_OK(f32_->AdamW(stream_, nullptr, FakeFloat(0x2000), FakeFloat(0x3000), FakeFloat(0x4000),
                        FakeFloat(0x5000), 24, hp));
  const OpCounts counts = f32_->counts();
  EXPECT_EQ(counts.adam_elements, 1024);
  EXPECT_EQ(counts.elementwise_bytes, 0);
  EXPECT_EQ(counts.calls, 2u);
}

TEST_F(CountingOpsTest, AdamW8bitCountsTheElementsStepped) {
  AdamParams hp;
  hp.step = 2;
  ASSERT_OK(bf16_->AdamW8bit(stream_, Fake(0x1000), FakeFloat(0x2000), FakeFloat(0x3000),
                             FakeBytes(0x4000), FakeFloat(0x5000), FakeBytes(0x6000),
                             FakeFloat(0x7000), 4096 + 10, hp));
  const OpCounts counts = bf16_->counts();
  EXPECT_EQ(counts.adam8bit_elements, 4106);
  EXPECT_EQ(counts.adam_elements, 0);  // fp32 AdamW's alone
  EXPECT_EQ(counts.elementwise_bytes, 0);
  EXPECT_EQ(counts.calls, 1u);
}

TEST_F(CountingOpsTest, ElementwiseBytesAreInTheComputeDtype) {
  for (CountingOps* ops : {f32_.get(), bf16_.get()}) {
    ASSERT_OK(ops->Add(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), 10));
  }
  EXPECT_EQ(f32_->counts().elementwise_bytes, 3 * 10 * 4);
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 3 * 10 * 2);

  // fp32 on the other side of a cast counts 4 bytes whatever the compute dtype.
  for (CountingOps* ops : {f32_.get(), bf16_.get()}) {
    ops->Reset();
    ASSERT_OK(ops->CastToFloat(stream_, FakeFloat(0x1000), Fake(0x2000), 10));
  }
  EXPECT_EQ(f32_->counts().elementwise_bytes, 10 * (4 + 4));
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 10 * (2 + 4));

  // LayerNorm N=2, C=8: inp and out N*C, weight and bias C in the dtype; mean and rstd fp32.
  for (CountingOps* ops : {f32_.get(), bf16_.get()}) {
    ops->Reset();
    ASSERT_OK(ops->LayerNormForward(stream_, Fake(0x1000), FakeFloat(0x2000), FakeFloat(0x3000),
                                    Fake(0x4000), Fake(0x5000), Fake(0x6000), 2, 8));
  }
  EXPECT_EQ(f32_->counts().elementwise_bytes, 4 * (2 * 16 + 2 * 8) + 2 * 4 * 2);
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 2 * (2 * 16 + 2 * 8) + 2 * 4 * 2);

  // Dropout N=3, C=5: in read, out written, and out read too when accumulating.
  bf16_->Reset();
  ASSERT_OK(bf16_->Dropout(stream_, Fake(0x1000), Fake(0x2000), 3, 5, 3, 0, 0.1f, 7, false));
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 2 * 15 * 2);
  ASSERT_OK(bf16_->Dropout(stream_, Fake(0x1000), Fake(0x2000), 3, 5, 3, 0, 0.1f, 7, true));
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 2 * 15 * 2 + 3 * 15 * 2);

  // Cross-entropy N=2 over V=5 of Vp=8: the gradient is written over the whole padded row.
  f32_->Reset();
  ASSERT_OK(f32_->SoftmaxCrossEntropy(stream_, FakeFloat(0x1000), Fake(0x2000), FakeTokens(0x3000),
                                      2, 5, 8, 0.0f));
  EXPECT_EQ(f32_->counts().elementwise_bytes, 4 * 2 * 5 + 2 * 4 * 2);
  f32_->Reset();
  ASSERT_OK(f32_->SoftmaxCrossEntropy(stream_, FakeFloat(0x1000), Fake(0x2000), FakeTokens(0x3000),
                                      2, 5, 8, 0.5f));
  EXPECT_EQ(f32_->counts().elementwise_bytes, 4 * 2 * 5 + 2 * 4 * 2 + 4 * 2 * 8);
  EXPECT_EQ(f32_->counts().matmul_flops, 0);
  EXPECT_EQ(stream_.enqueued, 0);
}

TEST_F(CountingOpsTest, DequantizationCountsCodesScalesAndOutput) {
  // 4096 + 17 values: 65 blocks in 1 group; 2057 code bytes (the last byte half used).
  const size_t n = 4096 + 17;
  for (CountingOps* ops : {f32_.get(), bf16_.get()}) {
    ASSERT_OK(ops->DequantizeNf4(stream_, Fake(0x1000), FakeBytes(0x2000), FakeBytes(0x3000),
                                 FakeFloat(0x4000), FakeFloat(0x5000), n));
  }
  EXPECT_EQ(f32_->counts().elementwise_bytes, 2057 + 65 + 4 + 4 + 4 * n);
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 2057 + 65 + 4 + 4 + 2 * n);
  f32_->Reset();
  ASSERT_OK(f32_->DequantizeInt8(
      stream_, Fake(0x1000), reinterpret_cast<const int8_t*>(Fake(0x2000)), FakeFloat(0x3000), n));
  EXPECT_EQ(f32_->counts().elementwise_bytes, n + 4 * 65 + 4 * n);
  bf16_->Reset();
  ASSERT_OK(bf16_->WidenBf16(stream_, Fake(0x1000), static_cast<const bf16*>(Fake(0x2000)), 10));
  EXPECT_EQ(bf16_->counts().elementwise_bytes, 10 * (2 + 2));
  EXPECT_EQ(stream_.enqueued, 0);
}

// Every op of the interface, on fake pointers: nothing is dereferenced, nothing enqueued.
int CallEveryOp(Ops& ops, Stream& s) {
  void* p = Fake(0x1000);
  const void* c = Fake(0x2000);
  float* f = FakeFloat(0x3000);
  const int32_t* t = FakeTokens(0x4000);
  AdamParams hp;
  const std::vector<Status> results = {
      ops.EncoderForward(s, p, t, c, c, 2, 4, 8),
      ops.EncoderBackward(s, p, p, c, t, 2, 4, 8),
      ops.LayerNormForward(s, p, f, f, c, c, c, 8, 8),
      ops.LayerNormBackward(s, p, p, p, c, c, c, f, f, 8, 8),
      ops.MatmulForward(s, p, c, c, c, 8, 8, 8),
      ops.MatmulBackward(s, p, p, p, c, c, c, 8, 8, 8),
      ops.AttentionForward(s, p, f, c, 2, 4, 8, 2, 1),
      ops.AttentionBackward(s, p, c, c, c, f, 2, 4, 8, 2, 1),
      ops.AttentionDecode(s, p, c, 4, 8, 2, 1),
      ops.RmsNormForward(s, p, f, c, c, 8, 8, 1e-5f),
      ops.RmsNormBackward(s, p, p, c, c, c, f, 8, 8),
      ops.RopeForward(s, p, 2, 4, 2, 1, 4, RopeSpec{}, 0),
      ops.RopeBackward(s, p, 2, 4, 2, 1, 4, RopeSpec{}, 3),
      ops.SwiGluForward(s, p, c, 8, 8),
      ops.SwiGluBackward(s, p, c, c, 8, 8),
      ops.GeluForward(s, p, c, 64),
      ops.GeluBackward(s, p, c, c, 64),
      ops.Add(s, p, c, c, 64),
      ops.Accumulate(s, p, c, 64),
      ops.AddScaledColumns(s, p, 24, 8, c, 8, 8, 0.5f),
      ops.ScaledColumns(s, p, c, 24, 8, 8, 8, 0.5f),
      ops.Dropout(s, p, c, 8, 8, 4, 0, 0.1f, 7, true),
      ops.SoftmaxCrossEntropy(s, f, p, t, 8, 50, 64, 1.0f / 8),
      ops.AccumulateToFloat(s, f, c, 64),
      ops.CastFromFloat(s, p, f, 64),
      ops.CastToFloat(s, f, c, 64),
      ops.SumSquares(s, f, f, 64),
      ops.DequantizeNf4(s, p, FakeBytes(0x5000), FakeBytes(0x6000), f, f, 100),
      ops.DequantizeInt8(s, p, reinterpret_cast<const int8_t*>(Fake(0x5000)), f, 100),
      ops.WidenBf16(s, p, static_cast<const bf16*>(c), 64),
      ops.AdamW(s, p, f, f, f, f, 64, hp),
      ops.AdamW8bit(s, p, f, f, FakeBytes(0x5000), f, FakeBytes(0x6000), f, 36, hp),
  };
  for (const Status& status : results) EXPECT_OK(status);
  return static_cast<int>(results.size());
}

TEST_F(CountingOpsTest, EveryOpRunsOnFakePointersWithoutTouchingThemOrTheStream) {
  const int ops = CallEveryOp(*bf16_, stream_);
  EXPECT_EQ(stream_.enqueued, 0);
  const OpCounts counts = bf16_->counts();
  EXPECT_EQ(counts.calls, static_cast<uint64_t>(ops));
  EXPECT_GT(counts.matmul_flops, 0);
  EXPECT_GT(counts.attention_flops, 0);
  EXPECT_EQ(counts.adam_elements, 64);
  EXPECT_EQ(counts.adam8bit_elements, 36);
  EXPECT_GT(counts.elementwise_bytes, 0);
}

TEST_F(CountingOpsTest, ResetZeroesEveryCounter) {
  CallEveryOp(*f32_, stream_);
  f32_->Reset();
  const OpCounts counts = f32_->counts();
  EXPECT_EQ(counts.matmul_flops, 0);
  EXPECT_EQ(counts.attention_flops, 0);
  EXPECT_EQ(counts.adam_elements, 0);
  EXPECT_EQ(counts.elementwise_bytes, 0);
  EXPECT_EQ(counts.calls, 0u);
  ASSERT_OK(f32_->Accumulate(stream_, Fake(0x1000), Fake(0x2000), 5));
  EXPECT_EQ(f32_->counts().elementwise_bytes, 3 * 5 * 4);  // counting resumes from zero
  EXPECT_EQ(f32_->counts().calls, 1u);
}

TEST_F(CountingOpsTest, ConcurrentCallsAreAllCounted) {
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 2000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      RecordingStream stream;
      for (int j = 0; j < kCallsPerThread; ++j) {
        EXPECT_OK(f32_->MatmulForward(stream, Fake(0x1000), Fake(0x2000), Fake(0x3000), nullptr, 4,
                                      8, 16));
        EXPECT_OK(f32_->Add(stream, Fake(0x1000), Fake(0x2000), Fake(0x3000), 1));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const OpCounts counts = f32_->counts();
  EXPECT_EQ(counts.calls, 2u * kThreads * kCallsPerThread);
  EXPECT_EQ(counts.matmul_flops, 1024.0 * kThreads * kCallsPerThread);
  EXPECT_EQ(counts.elementwise_bytes, 12.0 * kThreads * kCallsPerThread);
}

// Bad arguments: refused with the CPU backend's status (code and message), and not counted.
TEST_F(CountingOpsTest, BadArgumentsAreRefusedAsTheCpuOpsRefuseThem) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Ops> cpu, CreateCpuOps(DType::kF32, 1));
  AdamParams step0;
  step0.step = 0;
  const std::vector<std::pair<std::string, std::function<Status(Ops&)>>> cases = {
      {"negative N",
       [&](Ops& o) {
         return o.MatmulForward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), nullptr, -1, 8,
                                16);
       }},
      {"C not a multiple of NH",
       [&](Ops& o) {
         return o.AttentionForward(stream_, Fake(0x1000), FakeFloat(0x2000), Fake(0x3000), 2, 4, 10,
                                   4, 4);
       }},
      {"NH not a multiple of NKV",
       [&](Ops& o) {
         return o.AttentionBackward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), Fake(0x4000),
                                    FakeFloat(0x5000), 2, 4, 12, 3, 2);
       }},
      {"decode of no keys",
       [&](Ops& o) { return o.AttentionDecode(stream_, Fake(0x1000), Fake(0x2000), 0, 8, 2, 1); }},
      {"odd head size",
       [&](Ops& o) { return o.RopeForward(stream_, Fake(0x1000), 1, 4, 2, 1, 5, RopeSpec{}, 0); }},
      {"slice past the row",
       [&](Ops& o) {
         return o.AddScaledColumns(stream_, Fake(0x1000), 16, 10, Fake(0x2000), 4, 8, 0.5f);
       }},
      {"null dst",
       [&](Ops& o) { return o.ScaledColumns(stream_, nullptr, Fake(0x2000), 16, 0, 4, 8, 0.5f); }},
      {"p = 1",
       [&](Ops& o) {
         return o.Dropout(stream_, Fake(0x1000), Fake(0x2000), 4, 8, 4, 0, 1.0f, 7, false);
       }},
      {"V > Vp",
       [&](Ops& o) {
         return o.SoftmaxCrossEntropy(stream_, FakeFloat(0x1000), Fake(0x2000), FakeTokens(0x3000),
                                      2, 9, 8, 0.0f);
       }},
      {"null SumSquares result",
       [&](Ops& o) { return o.SumSquares(stream_, nullptr, FakeFloat(0x1000), 4); }},
      {"null DequantizeNf4 offset",
       [&](Ops& o) {
         return o.DequantizeNf4(stream_, Fake(0x1000), FakeBytes(0x2000), FakeBytes(0x3000),
                                FakeFloat(0x4000), nullptr, 64);
       }},
      {"null DequantizeInt8 absmax",
       [&](Ops& o) {
         return o.DequantizeInt8(stream_, Fake(0x1000),
                                 reinterpret_cast<const int8_t*>(Fake(0x2000)), nullptr, 64);
       }},
      {"null WidenBf16 in",
       [&](Ops& o) { return o.WidenBf16(stream_, Fake(0x1000), nullptr, 64); }},
      {"AdamW8bit step 0",
       [&](Ops& o) {
         return o.AdamW8bit(stream_, nullptr, FakeFloat(0x1000), FakeFloat(0x2000),
                            FakeBytes(0x3000), FakeFloat(0x4000), FakeBytes(0x5000),
                            FakeFloat(0x6000), 4, step0);
       }},
      {"null AdamW8bit v_absmax",
       [&](Ops& o) {
         return o.AdamW8bit(stream_, nullptr, FakeFloat(0x1000), FakeFloat(0x2000),
                            FakeBytes(0x3000), FakeFloat(0x4000), FakeBytes(0x5000), nullptr, 4,
                            AdamParams{});
       }},
      {"AdamW step 0",
       [&](Ops& o) {
         return o.AdamW(stream_, nullptr, FakeFloat(0x1000), FakeFloat(0x2000), FakeFloat(0x3000),
                        FakeFloat(0x4000), 4, step0);
       }},
  };
  for (const auto& [name, call] : cases) {
    SCOPED_TRACE(name);
    const Status expected = call(*cpu);
    ASSERT_THAT(expected, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(call(*f32_), expected);
  }
  EXPECT_THAT(
      f32_->MatmulForward(stream_, Fake(0x1000), Fake(0x2000), Fake(0x3000), nullptr, 4, -8, 16),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MatmulForward: negative size C=-8")));
  const OpCounts counts = f32_->counts();
  EXPECT_EQ(counts.calls, 0u);
  EXPECT_EQ(counts.matmul_flops, 0);
  EXPECT_EQ(counts.attention_flops, 0);
  EXPECT_EQ(counts.adam_elements, 0);
  EXPECT_EQ(counts.elementwise_bytes, 0);
  EXPECT_EQ(stream_.enqueued, 0);  // the CPU ops refused before enqueuing too
}

}  // namespace
}  // namespace strata
