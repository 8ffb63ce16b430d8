// CpuOps through the Ops interface on a CPU device's stream, for both compute dtypes: a few
// ops (encoder, layernorm forward/backward, matmul forward, attention forward/backward, GELU,
// softmax + cross-entropy, AdamW, casts, sum of squares; LLaMA's RMSNorm, rotary embedding,
// grouped-query attention, SwiGLU; the LoRA column-slice ops and dropout, and MatmulBackward
// with a null dweight, a frozen weight; the dequantization of nf4, int8 and bf16 pieces) give
// what the reference kernels give when called directly; calls only enqueue (nothing changes
// before Synchronize); the configured OpenMP thread count is in force on the stream's thread;
// bad sizes are rejected before anything is enqueued.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise, as the kernels' own tests:
// float atol 1e-4, rtol 1e-4 (matmul via oneDNN: rtol 1e-4 over C = 67 products); bf16
// atol 2e-3, rtol 1e-2 (one bf16 ulp is at most 2^-7 relative, plus fp32 differences).
// The LoRA column-slice ops, dropout and dequantization: exact (the same fp32 operations as
// the reference; for dequantization, cpu::DequantizePiece rounded once to the dtype).
// dinp and dbias of MatmulBackward with and without dweight: exact (the same GEMM and sums).
#include "kernels/cpu/cpu_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "device/cpu_device.h"
#include "core/testing/status_matchers.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/kernel_test_util.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace strata {
namespace {

using cpu::ExpectAllClose;
using cpu::RandomFloats;
using cpu::StorageTypes;
using cpu::ToFloats;
using cpu::ToStorage;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType kValue = DType::kF32;
  static constexpr float kAtol = 1e-4f, kRtol = 1e-4f;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType kValue = DType::kBF16;
  static constexpr float kAtol = 2e-3f, kRtol = 1e-2f;
};

template <typename T>
class CpuOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = CreateCpuDevice(CpuDeviceOptions{});
    auto stream = device_->CreateStream("compute");
    ASSERT_OK(stream);
    stream_ = std::move(stream).value();
    ASSERT_OK_AND_ASSIGN(ops_, CreateCpuOps(DTypeOf<T>::kValue, 3));
    ASSERT_EQ(ops_->dtype(), DTypeOf<T>::kValue);
  }

  // Device-tier copy of `values`; the buffer is kept alive until the test ends.
  template <typename E>
  E* Upload(const std::vector<E>& values) {
    auto buffer = device_->Allocate(Tier::kDevice, StateKind::kActivations,
                                    values.size() * sizeof(E), "test buffer");
    EXPECT_OK(buffer);
    buffers_.push_back(std::move(buffer).value());
    E* data = buffers_.back().template as<E>();
    if (!values.empty()) std::memcpy(data, values.data(), values.size() * sizeof(E));
    return data;
  }

  void Expect(const T* got, const std::vector<T>& ref, const std::string& what) {
    ExpectAllClose(ToFloats(got, ref.size()), ToFloats(ref.data(), ref.size()), DTypeOf<T>::kAtol,
                   DTypeOf<T>::kRtol, what);
  }

  void Sync() { ASSERT_OK(stream_->Synchronize()); }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Ops> ops_;
  std::vector<Buffer> buffers_;
};
TYPED_TEST_SUITE(CpuOpsTest, StorageTypes);

TYPED_TEST(CpuOpsTest, EncoderAndLayerNormMatchReferences) {
  using T = TypeParam;
  const int B = 2, T_len = 7, C = 13, V = 5, N = B * T_len;
  std::vector<int32_t> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 3) % V;
  const std::vector<T> wte = ToStorage<T>(RandomFloats(size_t(V) * C, -1, 1, 1));
  const std::vector<T> wpe = ToStorage<T>(RandomFloats(size_t(T_len) * C, -1, 1, 2));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 3));
  const std::vector<T> bias = ToStorage<T>(RandomFloats(C, -0.5f, 0.5f, 4));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 5));

  T* d_embedded = this->Upload(std::vector<T>(size_t(N) * C));
  T* d_normed = this->Upload(std::vector<T>(size_t(N) * C));
  float* d_mean = this->Upload(std::vector<float>(N));
  float* d_rstd = this->Upload(std::vector<float>(N));
  const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 6));
  const std::vector<T> dparam0 = ToStorage<T>(RandomFloats(C, -1, 1, 7));
  T* d_dinp = this->Upload(dinp0);
  T* d_dweight = this->Upload(dparam0);
  T* d_dbias = this->Upload(dparam0);
  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  ASSERT_OK(ops.EncoderForward(s, d_embedded, this->Upload(tokens), this->Upload(wte),
                               this->Upload(wpe), B, T_len, C));
  ASSERT_OK(ops.LayerNormForward(s, d_normed, d_mean, d_rstd, d_embedded, this->Upload(weight),
                                 this->Upload(bias), N, C));
  ASSERT_OK(ops.LayerNormBackward(s, d_dinp, d_dweight, d_dbias, this->Upload(dout), d_embedded,
                                  this->Upload(weight), d_mean, d_rstd, N, C));
  this->Sync();

  std::vector<T> embedded(size_t(N) * C), normed(size_t(N) * C);
  std::vector<float> mean(N), rstd(N);
  cpu::EncoderForwardReference(embedded.data(), tokens.data(), wte.data(), wpe.data(), B, T_len, C);
  cpu::LayerNormForwardReference(normed.data(), mean.data(), rstd.data(), embedded.data(),
                                 weight.data(), bias.data(), N, C);
  std::vector<T> dinp = dinp0, dweight = dparam0, dbias = dparam0;
  cpu::LayerNormBackwardReference(dinp.data(), dweight.data(), dbias.data(), dout.data(),
                                  embedded.data(), weight.data(), mean.data(), rstd.data(), N, C);
  this->Expect(d_embedded, embedded, "encoder out");
  this->Expect(d_normed, normed, "layernorm out");
  ExpectAllClose(std::vector<float>(d_rstd, d_rstd + N), rstd, 1e-5f, 1e-5f, "rstd");
  this->Expect(d_dinp, dinp, "layernorm dinp");
  this->Expect(d_dweight, dweight, "layernorm dweight");
  this->Expect(d_dbias, dbias, "layernorm dbias");
}

TYPED_TEST(CpuOpsTest, MatmulAttentionAndGeluMatchReferences) {
  using T = TypeParam;
  const int B = 2, T_len = 7, C = 39, NH = 3, N = B * T_len, OC = 3 * C;
  const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 8));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(size_t(OC) * C, -0.3f, 0.3f, 9));
  const std::vector<T> bias = ToStorage<T>(RandomFloats(OC, -0.1f, 0.1f, 10));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 11));
  const std::vector<T> dqkv0 = ToStorage<T>(RandomFloats(size_t(N) * OC, -1, 1, 12));

  T* d_qkv = this->Upload(std::vector<T>(size_t(N) * OC));
  T* d_att = this->Upload(std::vector<T>(size_t(N) * C));
  T* d_gelu = this->Upload(std::vector<T>(size_t(N) * C));
  float* d_stats = this->Upload(std::vector<float>(size_t(B) * NH * T_len));
  T* d_dqkv = this->Upload(dqkv0);
  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  ASSERT_OK(ops.MatmulForward(s, d_qkv, this->Upload(inp), this->Upload(weight), this->Upload(bias),
                              N, C, OC));
  ASSERT_OK(ops.AttentionForward(s, d_att, d_stats, d_qkv, B, T_len, C, NH, NH));
  ASSERT_OK(ops.AttentionBackward(s, d_dqkv, this->Upload(dout), d_qkv, d_att, d_stats, B, T_len,
                                  C, NH, NH));
  ASSERT_OK(ops.GeluForward(s, d_gelu, d_att, size_t(N) * C));
  this->Sync();

  // References on the device's own intermediate results, so each op is checked alone.
  std::vector<T> qkv(size_t(N) * OC);
  cpu::MatmulForwardReference(qkv.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  this->Expect(d_qkv, qkv, "matmul out");
  const std::vector<T> device_qkv(d_qkv, d_qkv + size_t(N) * OC);
  std::vector<T> att(size_t(N) * C), gelu(size_t(N) * C), dqkv = dqkv0;
  std::vector<float> stats(size_t(B) * NH * T_len);
  cpu::AttentionForwardReference(att.data(), stats.data(), device_qkv.data(), B, T_len, C, NH, NH);
  cpu::AttentionBackwardReference(dqkv.data(), dout.data(), device_qkv.data(), att.data(),
                                  stats.data(), B, T_len, C, NH, NH);
  const std::vector<T> device_att(d_att, d_att + size_t(N) * C);
  cpu::GeluForwardReference(gelu.data(), device_att.data(), gelu.size());
  this->Expect(d_att, att, "attention out");
  ExpectAllClose(std::vector<float>(d_stats, d_stats + stats.size()), stats, 1e-5f, 1e-5f,
                 "attention stats");
  this->Expect(d_dqkv, dqkv, "attention dqkv");
  this->Expect(d_gelu, gelu, "gelu out");
}

TYPED_TEST(CpuOpsTest, CrossEntropyAdamWAndCastsMatchReferences) {
  using T = TypeParam;
  const int N = 7, V = 67, Vp = 80;
  const size_t n = 1003;
  const std::vector<T> logits = ToStorage<T>(RandomFloats(size_t(N) * Vp, -4, 4, 13));
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 11) % V;
  const std::vector<float> master = RandomFloats(n, -1, 1, 14), grad = RandomFloats(n, -1, 1, 15);
  const std::vector<float> m0 = RandomFloats(n, -0.1f, 0.1f, 16);
  const std::vector<float> v0 = RandomFloats(n, 0.0f, 0.01f, 17);
  AdamParams hp;
  hp.step = 2;
  hp.weight_decay = 0.1f;

  T* d_logits = this->Upload(logits);
  float* d_losses = this->Upload(std::vector<float>(N, -1.0f));
  T* d_param = this->Upload(std::vector<T>(n));
  float* d_master = this->Upload(master);
  float* d_m = this->Upload(m0);
  float* d_v = this->Upload(v0);
  float* d_sum = this->Upload(std::vector<float>(1, -1.0f));
  float* d_back = this->Upload(std::vector<float>(n));
  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  ASSERT_OK(
      ops.SoftmaxCrossEntropy(s, d_losses, d_logits, this->Upload(targets), N, V, Vp, 0.25f));
  ASSERT_OK(ops.SumSquares(s, d_sum, this->Upload(grad), n));
  {
    AdamParams scoped = hp;  // the op must copy its hyper-parameters
    ASSERT_OK(ops.AdamW(s, d_param, d_master, this->Upload(grad), d_m, d_v, n, scoped));
    scoped.lr = 1e9f;
  }
  ASSERT_OK(ops.CastToFloat(s, d_back, d_param, n));
  this->Sync();

  std::vector<T> dlogits = logits;
  std::vector<float> losses(N);
  cpu::SoftmaxCrossEntropyReference(losses.data(), dlogits.data(), targets.data(), N, V, Vp,
                                    0.25f);
  ExpectAllClose(std::vector<float>(d_losses, d_losses + N), losses, 1e-5f, 1e-5f, "losses");
  this->Expect(d_logits, dlogits, "dlogits");
  float sum = 0.0f;
  cpu::SumSquaresReference(&sum, grad.data(), n);
  EXPECT_NEAR(*d_sum, sum, 1e-6f * sum);
  std::vector<T> param(n);
  std::vector<float> master_ref = master, m_ref = m0, v_ref = v0;
  cpu::AdamWReference(param.data(), master_ref.data(), grad.data(), m_ref.data(), v_ref.data(), n,
                      hp);
  ExpectAllClose(std::vector<float>(d_master, d_master + n), master_ref, 1e-7f, 1e-6f, "master");
  this->Expect(d_param, param, "param");
  ExpectAllClose(std::vector<float>(d_back, d_back + n), ToFloats(d_param, n), 0.0f, 0.0f,
                 "cast to float");
}

// A quantized base's pieces decode to cpu::DequantizePiece's values (rounded once to the
// dtype), bit for bit, at sizes with a padded block, several chunks and two absmax groups.
TYPED_TEST(CpuOpsTest, DequantizationMatchesTheHostReference) {
  using T = TypeParam;
  for (size_t n : {size_t{1}, size_t{100}, size_t{4096 + 17}, size_t{300 * 64 + 29}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<float> x = RandomFloats(n, -2.0f, 2.0f, static_cast<uint32_t>(n));
    for (size_t i = 64; i < std::min(n, size_t{128}); ++i) x[i] = 0.0f;  // a zero block
    for (BaseDType dtype : {BaseDType::kNF4, BaseDType::kInt8, BaseDType::kBF16}) {
      SCOPED_TRACE(BaseDTypeName(dtype));
      const QuantPiece layout = PieceLayout(dtype, n);
      std::vector<uint8_t> host_piece(layout.bytes);
      ASSERT_OK(cpu::QuantizePiece(dtype, x.data(), n, host_piece.data()));
      std::vector<float> expected(n);
      cpu::DequantizePiece(dtype, host_piece.data(), n, expected.data());
      const uint8_t* piece = this->Upload(host_piece);
      T* out = this->Upload(std::vector<T>(n));
      if (dtype == BaseDType::kNF4) {
        ASSERT_OK(this->ops_->DequantizeNf4(
            *this->stream_, out, piece + layout.codes, piece + layout.absmax,
            reinterpret_cast<const float*>(piece + layout.absmax2),
            reinterpret_cast<const float*>(piece + layout.offset), n));
      } else if (dtype == BaseDType::kInt8) {
        ASSERT_OK(this->ops_->DequantizeInt8(
            *this->stream_, out, reinterpret_cast<const int8_t*>(piece + layout.codes),
            reinterpret_cast<const float*>(piece + layout.absmax), n));
      } else {
        ASSERT_OK(this->ops_->WidenBf16(*this->stream_, out,
                                        reinterpret_cast<const bf16*>(piece + layout.codes), n));
      }
      this->Sync();
      const std::vector<T> want = ToStorage<T>(expected);
      ASSERT_EQ(std::memcmp(out, want.data(), n * sizeof(T)), 0);
    }
  }
  EXPECT_THAT(this->ops_->DequantizeInt8(*this->stream_, nullptr, nullptr, nullptr, 64),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DequantizeInt8: null pointer out, codes, absmax")));
}

// AdamW8bit through the stream (3 threads): bit for bit the reference of 8-bit Adam states.
TYPED_TEST(CpuOpsTest, AdamW8bitMatchesTheReference) {
  using T = TypeParam;
  const size_t n = 3 * kAdamStateBlock + 51, blocks = cpu::Adam8bitBlocks(n);
  std::vector<float> master = RandomFloats(n, -1, 1, 61), grad = RandomFloats(n, -1, 1, 62);
  std::vector<float> m = RandomFloats(n, -1e-2f, 1e-2f, 63), v = RandomFloats(n, 0, 1e-4f, 64);
  std::vector<uint8_t> m_codes(n), v_codes(n);
  std::vector<float> m_absmax(blocks), v_absmax(blocks);
  cpu::QuantizeMoments(m.data(), n, true, m_codes.data(), m_absmax.data());
  cpu::QuantizeMoments(v.data(), n, false, v_codes.data(), v_absmax.data());
  float* d_master = this->Upload(master);
  uint8_t* d_m_codes = this->Upload(m_codes);
  uint8_t* d_v_codes = this->Upload(v_codes);
  float* d_m_absmax = this->Upload(m_absmax);
  float* d_v_absmax = this->Upload(v_absmax);
  T* d_param = this->Upload(std::vector<T>(n));
  AdamParams hp;
  hp.step = 5;
  hp.weight_decay = 0.1f;
  ASSERT_OK(this->ops_->AdamW8bit(*this->stream_, d_param, d_master, this->Upload(grad),
                                  d_m_codes, d_m_absmax, d_v_codes, d_v_absmax, n, hp));
  this->Sync();
  std::vector<T> param(n);
  cpu::Adam8bitReference(param.data(), master.data(), grad.data(), m_codes.data(),
                         m_absmax.data(), v_codes.data(), v_absmax.data(), n, hp);
  EXPECT_EQ(std::memcmp(d_master, master.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(d_param, param.data(), n * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(d_m_codes, m_codes.data(), n), 0);
  EXPECT_EQ(std::memcmp(d_v_codes, v_codes.data(), n), 0);
  EXPECT_EQ(std::memcmp(d_m_absmax, m_absmax.data(), blocks * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(d_v_absmax, v_absmax.data(), blocks * sizeof(float)), 0);
  hp.step = 0;
  EXPECT_THAT(this->ops_->AdamW8bit(*this->stream_, nullptr, d_master, d_master, d_m_codes,
                                    d_m_absmax, d_v_codes, d_v_absmax, n, hp),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step=0")));
}

// LLaMA's ops: RMSNorm, rotary embedding, grouped-query attention, SwiGLU and the encoder
// without position embedding, chained as in a block.
TYPED_TEST(CpuOpsTest, LlamaOpsMatchReferences) {
  using T = TypeParam;
  const int B = 2, T_len = 7, NH = 4, NKV = 2, hs = 6, C = NH * hs, N = B * T_len, F = 11, V = 13;
  const int QKV = C + 2 * NKV * hs;
  const float eps = 1e-5f;
  RopeSpec rope;  // Llama 3.1's
  rope.theta = 500000.0f;
  rope.scaling = RopeScaling::kLlama3;
  std::vector<int32_t> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 5) % V;
  const std::vector<T> wte = ToStorage<T>(RandomFloats(size_t(V) * C, -1, 1, 30));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 31));
  const std::vector<T> qkv0 = ToStorage<T>(RandomFloats(size_t(N) * QKV, -1, 1, 32));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 33));
  const std::vector<T> gate_up = ToStorage<T>(RandomFloats(size_t(N) * 2 * F, -3, 3, 34));
  const std::vector<T> dmlp = ToStorage<T>(RandomFloats(size_t(N) * F, -1, 1, 35));

  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  T* d_encoded = this->Upload(std::vector<T>(size_t(N) * C));
  T* d_norm = this->Upload(std::vector<T>(size_t(N) * C));
  float* d_rstd = this->Upload(std::vector<float>(N));
  T* d_dinp = this->Upload(std::vector<T>(size_t(N) * C));
  T* d_dweight = this->Upload(std::vector<T>(C));
  T* d_qkv = this->Upload(qkv0);
  T* d_att = this->Upload(std::vector<T>(size_t(N) * C));
  float* d_stats = this->Upload(std::vector<float>(size_t(B) * NH * T_len));
  T* d_dqkv = this->Upload(std::vector<T>(size_t(N) * QKV));
  T* d_swiglu = this->Upload(std::vector<T>(size_t(N) * F));
  T* d_dgate_up = this->Upload(std::vector<T>(size_t(N) * 2 * F));
  const T* d_dout = this->Upload(dout);
  ASSERT_OK(ops.EncoderForward(s, d_encoded, this->Upload(tokens), this->Upload(wte), nullptr, B,
                               T_len, C));
  ASSERT_OK(ops.RmsNormForward(s, d_norm, d_rstd, d_encoded, this->Upload(weight), N, C, eps));
  ASSERT_OK(ops.RmsNormBackward(s, d_dinp, d_dweight, d_dout, d_encoded, this->Upload(weight),
                                d_rstd, N, C));
  ASSERT_OK(ops.RopeForward(s, d_qkv, B, T_len, NH, NKV, hs, rope, 0));
  ASSERT_OK(ops.AttentionForward(s, d_att, d_stats, d_qkv, B, T_len, C, NH, NKV));
  ASSERT_OK(ops.AttentionBackward(s, d_dqkv, d_dout, d_qkv, d_att, d_stats, B, T_len, C, NH, NKV));
  ASSERT_OK(ops.RopeBackward(s, d_dqkv, B, T_len, NH, NKV, hs, rope, 0));
  ASSERT_OK(ops.SwiGluForward(s, d_swiglu, this->Upload(gate_up), N, F));
  ASSERT_OK(ops.SwiGluBackward(s, d_dgate_up, this->Upload(gate_up), this->Upload(dmlp), N, F));
  this->Sync();

  std::vector<T> encoded(size_t(N) * C), norm(size_t(N) * C), dinp(size_t(N) * C), dweight(C);
  std::vector<float> rstd(N);
  cpu::EncoderForwardReference(encoded.data(), tokens.data(), wte.data(),
                               static_cast<const T*>(nullptr), B, T_len, C);
  this->Expect(d_encoded, encoded, "encoder out");
  cpu::RmsNormForwardReference(norm.data(), rstd.data(), encoded.data(), weight.data(), N, C, eps);
  cpu::RmsNormBackwardReference(dinp.data(), dweight.data(), dout.data(), encoded.data(),
                                weight.data(), rstd.data(), N, C);
  this->Expect(d_norm, norm, "rmsnorm out");
  this->Expect(d_dinp, dinp, "rmsnorm dinp");
  this->Expect(d_dweight, dweight, "rmsnorm dweight");
  std::vector<T> qkv = qkv0, att(size_t(N) * C), dqkv(size_t(N) * QKV);
  std::vector<float> stats(size_t(B) * NH * T_len);
  cpu::RopeReference(qkv.data(), B, T_len, NH, NKV, hs, rope, 0, 1);
  this->Expect(d_qkv, qkv, "rotated qkv");
  cpu::AttentionForwardReference(att.data(), stats.data(), qkv.data(), B, T_len, C, NH, NKV);
  cpu::AttentionBackwardReference(dqkv.data(), dout.data(), qkv.data(), att.data(), stats.data(),
                                  B, T_len, C, NH, NKV);
  cpu::RopeReference(dqkv.data(), B, T_len, NH, NKV, hs, rope, 0, -1);
  this->Expect(d_att, att, "gqa attention out");
  this->Expect(d_dqkv, dqkv, "gqa dqkv (unrotated)");
  std::vector<T> swiglu(size_t(N) * F), dgate_up(size_t(N) * 2 * F);
  cpu::SwiGluForwardReference(swiglu.data(), gate_up.data(), N, F);
  cpu::SwiGluBackwardReference(dgate_up.data(), gate_up.data(), dmlp.data(), N, F);
  this->Expect(d_swiglu, swiglu, "swiglu out");
  this->Expect(d_dgate_up, dgate_up, "swiglu dinp");
}

TYPED_TEST(CpuOpsTest, LoraColumnOpsMatchReferences) {
  using T = TypeParam;
  // Odd shapes: 5 rows, a slice of 7 columns from column 4 of rows of 13.
  const int N = 5, cols = 13, col = 4, n = 7;
  const float alpha = 0.75f;
  const std::vector<T> dst0 = ToStorage<T>(RandomFloats(size_t(N) * cols, -1, 1, 40));
  const std::vector<T> lora_out = ToStorage<T>(RandomFloats(size_t(N) * n, -1, 1, 41));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * cols, -1, 1, 42));
  const std::vector<T> dlora0 = ToStorage<T>(RandomFloats(size_t(N) * n, -1, 1, 43));
  T* d_dst = this->Upload(dst0);
  T* d_dlora = this->Upload(dlora0);  // prefilled: ScaledColumns overwrites
  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  ASSERT_OK(ops.AddScaledColumns(s, d_dst, cols, col, this->Upload(lora_out), N, n, alpha));
  ASSERT_OK(ops.ScaledColumns(s, d_dlora, this->Upload(dout), cols, col, N, n, alpha));
  this->Sync();

  std::vector<T> dst = dst0, dlora = dlora0;
  cpu::AddScaledColumnsReference(dst.data(), cols, col, lora_out.data(), N, n, alpha);
  cpu::ScaledColumnsReference(dlora.data(), dout.data(), cols, col, N, n, alpha);
  ExpectAllClose(ToFloats(d_dst, dst.size()), ToFloats(dst), 0.0f, 0.0f, "add scaled columns");
  ExpectAllClose(ToFloats(d_dlora, dlora.size()), ToFloats(dlora), 0.0f, 0.0f, "scaled columns");
  // The columns outside the slice are the prefill's.
  EXPECT_EQ(Load(d_dst + 3), Load(&dst0[3]));
  EXPECT_EQ(Load(d_dst + 4 * cols + 12), Load(&dst0[4 * cols + 12]));
  EXPECT_NE(Load(d_dst + 4 * cols + 4), Load(&dst0[4 * cols + 4]));
}

// Dropout through the stream: overwriting, accumulating into a prefill, and the same two
// sample rows as two calls (row0 = 5 and 6); all exactly the reference's bits.
TYPED_TEST(CpuOpsTest, DropoutMatchesReference) {
  using T = TypeParam;
  const int T_len = 7, N = 2 * T_len, C = 13;
  const int64_t row0 = 5;
  const float p = 0.3f;
  const uint64_t key = 0xda7a5eedull;
  const std::vector<T> in = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 49));
  const std::vector<T> prefill = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 50));
  T* d_in = this->Upload(in);
  T* d_out = this->Upload(prefill);
  T* d_sum = this->Upload(prefill);
  T* d_split = this->Upload(prefill);
  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  ASSERT_OK(ops.Dropout(s, d_out, d_in, N, C, T_len, row0, p, key, false));
  ASSERT_OK(ops.Dropout(s, d_sum, d_in, N, C, T_len, row0, p, key, true));
  ASSERT_OK(ops.Dropout(s, d_split, d_in, T_len, C, T_len, row0, p, key, false));
  ASSERT_OK(ops.Dropout(s, d_split + T_len * C, d_in + T_len * C, T_len, C, T_len, row0 + 1, p, key,
                        false));
  this->Sync();

  std::vector<T> out = prefill, sum = prefill;
  cpu::DropoutReference(out.data(), in.data(), N, C, T_len, row0, p, key, false);
  cpu::DropoutReference(sum.data(), in.data(), N, C, T_len, row0, p, key, true);
  ExpectAllClose(ToFloats(d_out, out.size()), ToFloats(out), 0.0f, 0.0f, "dropout");
  ExpectAllClose(ToFloats(d_sum, sum.size()), ToFloats(sum), 0.0f, 0.0f, "dropout accumulate");
  ExpectAllClose(ToFloats(d_split, out.size()), ToFloats(out), 0.0f, 0.0f, "dropout in 2 calls");
  size_t dropped = 0;
  for (size_t at = 0; at < out.size(); ++at) dropped += Load(&out[at]) == 0.0f ? 1 : 0;
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(dropped, out.size());
}

TYPED_TEST(CpuOpsTest, MatmulBackwardWithoutDweightGivesTheSameDinpAndDbias) {
  using T = TypeParam;
  const int N = 14, C = 39, OC = 45;
  const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 44));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(size_t(OC) * C, -0.3f, 0.3f, 45));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * OC, -1, 1, 46));
  const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 47));
  const std::vector<T> dbias0 = ToStorage<T>(RandomFloats(OC, -1, 1, 48));
  const T* d_inp = this->Upload(inp);
  const T* d_weight = this->Upload(weight);
  const T* d_dout = this->Upload(dout);
  T* d_dinp = this->Upload(dinp0);
  T* d_dweight = this->Upload(std::vector<T>(size_t(OC) * C));
  T* d_dbias = this->Upload(dbias0);
  T* d_dinp_frozen = this->Upload(dinp0);
  T* d_dbias_frozen = this->Upload(dbias0);
  Ops& ops = *this->ops_;
  Stream& s = *this->stream_;
  ASSERT_OK(ops.MatmulBackward(s, d_dinp, d_dweight, d_dbias, d_dout, d_inp, d_weight, N, C, OC));
  ASSERT_OK(ops.MatmulBackward(s, d_dinp_frozen, nullptr, d_dbias_frozen, d_dout, d_inp, d_weight,
                               N, C, OC));
  this->Sync();

  ExpectAllClose(ToFloats(d_dinp_frozen, dinp0.size()), ToFloats(d_dinp, dinp0.size()), 0.0f,
                 0.0f, "dinp with a null dweight");
  ExpectAllClose(ToFloats(d_dbias_frozen, dbias0.size()), ToFloats(d_dbias, dbias0.size()), 0.0f,
                 0.0f, "dbias with a null dweight");
  std::vector<T> dinp = dinp0, dbias = dbias0;
  cpu::MatmulBackwardReference(dinp.data(), static_cast<T*>(nullptr), dbias.data(), dout.data(),
                               inp.data(), weight.data(), N, C, OC);
  this->Expect(d_dinp_frozen, dinp, "matmul dinp (null dweight)");
  this->Expect(d_dbias_frozen, dbias, "matmul dbias (null dweight)");
}

TYPED_TEST(CpuOpsTest, CallsOnlyEnqueueAndSetTheThreadCount) {
  using T = TypeParam;
  const size_t n = 67;
  const std::vector<T> src = ToStorage<T>(RandomFloats(n, -1, 1, 18));
  T* d_dst = this->Upload(std::vector<T>(n));
  // Hold the stream until the test has looked at the output.
  std::mutex gate;
  gate.lock();
  this->stream_->EnqueueHost([&gate] {
    std::lock_guard<std::mutex> wait(gate);
    return absl::OkStatus();
  });
  ASSERT_OK(this->ops_->Add(*this->stream_, d_dst, this->Upload(src), this->Upload(src), n));
  int threads_on_stream = 0;
  this->stream_->EnqueueHost([&threads_on_stream] {
    threads_on_stream = omp_get_max_threads();
    return absl::OkStatus();
  });
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Load(d_dst + i), 0.0f) << "ran before the stream did";
  gate.unlock();
  this->Sync();
  std::vector<T> expected(n);
  cpu::AddReference(expected.data(), src.data(), src.data(), n);
  this->Expect(d_dst, expected, "add");
  EXPECT_EQ(threads_on_stream, 3);
}

TEST(CpuOps, RejectsBadSizesBeforeEnqueueing) {
  auto device = CreateCpuDevice(CpuDeviceOptions{});
  ASSERT_OK_AND_ASSIGN(auto stream, device->CreateStream("compute"));
  ASSERT_OK_AND_ASSIGN(auto ops, CreateCpuOps(DType::kF32, 0));
  float buffer[64] = {};
  Status bad_heads = ops->AttentionForward(*stream, buffer, buffer, buffer, 1, 2, 13, 3, 3);
  EXPECT_THAT(bad_heads, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NH=3")));
  Status bad_groups = ops->AttentionForward(*stream, buffer, buffer, buffer, 1, 2, 12, 3, 2);
  EXPECT_THAT(bad_groups, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NKV=2")));
  Status odd_head = ops->RopeForward(*stream, buffer, 1, 2, 2, 2, 3, RopeSpec{}, 0);
  EXPECT_THAT(odd_head, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hs=3")));
  Status padded = ops->SoftmaxCrossEntropy(*stream, buffer, buffer, nullptr, 1, 9, 8, 1.0f);
  EXPECT_THAT(padded, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Vp=8")));
  Status negative =
      ops->LayerNormForward(*stream, buffer, buffer, buffer, buffer, buffer, buffer, -1, 13);
  EXPECT_THAT(negative, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("N=-1")));
  // The LoRA ops: a slice past the row's end, a negative size, a null pointer.
  Status past_end = ops->AddScaledColumns(*stream, buffer, 13, 7, buffer, 5, 7, 0.75f);
  EXPECT_THAT(past_end, StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr("AddScaledColumns"), HasSubstr("dst_cols=13"))));
  Status past_src_end = ops->ScaledColumns(*stream, buffer, buffer, 10, 4, 5, 7, 0.75f);
  EXPECT_THAT(past_src_end, StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("ScaledColumns"), HasSubstr("src_cols=10"))));
  Status negative_n = ops->ScaledColumns(*stream, buffer, buffer, 13, 4, 5, -1, 0.75f);
  EXPECT_THAT(negative_n, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n=-1")));
  Status negative_col = ops->AddScaledColumns(*stream, buffer, 13, -2, buffer, 5, 7, 0.75f);
  EXPECT_THAT(negative_col, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("col=-2")));
  Status null_src = ops->AddScaledColumns(*stream, buffer, 13, 4, nullptr, 5, 7, 0.75f);
  EXPECT_THAT(null_src, StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr("AddScaledColumns"), HasSubstr("src"))));
  // Dropout: negative sizes and row0, no positions per sample row, p outside [0, 1), a null
  // pointer (allowed when there are no elements).
  EXPECT_THAT(
      ops->Dropout(*stream, buffer, buffer, -1, 4, 2, 0, 0.5f, 1, false),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("Dropout"), HasSubstr("N=-1"))));
  EXPECT_THAT(ops->Dropout(*stream, buffer, buffer, 4, -3, 2, 0, 0.5f, 1, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("C=-3")));
  EXPECT_THAT(ops->Dropout(*stream, buffer, buffer, 4, 4, 2, -1, 0.5f, 1, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row0=-1")));
  EXPECT_THAT(
      ops->Dropout(*stream, buffer, buffer, 4, 4, 0, 0, 0.5f, 1, false),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("Dropout"), HasSubstr("T=0"))));
  for (float p : {1.0f, -0.25f, 1.5f, NAN}) {
    EXPECT_THAT(
        ops->Dropout(*stream, buffer, buffer, 4, 4, 2, 0, p, 1, false),
        StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("Dropout"), HasSubstr("p="))))
        << p;
  }
  EXPECT_THAT(ops->Dropout(*stream, buffer, nullptr, 4, 4, 2, 0, 0.5f, 1, true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Dropout"), HasSubstr("null pointer in"))));
  EXPECT_THAT(ops->Dropout(*stream, nullptr, buffer, 4, 4, 2, 0, 0.5f, 1, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null pointer out")));
  AdamParams hp;
  hp.step = 0;
  EXPECT_EQ(ops->AdamW(*stream, nullptr, buffer, buffer, buffer, buffer, 4, hp).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_OK(stream->Synchronize());  // nothing was enqueued, so nothing failed
}

}  // namespace
}  // namespace strata
