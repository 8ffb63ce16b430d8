// CudaOps (cuda_ops.h) against the CPU reference kernels (kernels/cpu/*.h, the
// specification), op by op, for both compute dtypes, in the style of ggml's
// test-backend-ops: seeded random inputs at odd sizes (not multiples of a warp, a block or
// a tile), the same inputs to the reference on the host, and an elementwise check
// |got - ref| <= atol + rtol * |ref| with a tolerance stated per op (kTolerances below).
// Backward ops start from random gradient buffers, so accumulation (+=) is checked too.
// Dequantization is compared bit for bit with the host reference (cpu::DequantizePiece).
//
// The op tests need a GPU and skip (with the reason) where CudaDeviceCount finds none, e.g.
// on a build machine without a driver, or CreateCudaDevice says none is usable. The argument checks
// need no GPU and run wherever strata is built with CUDA; where it is built without, CreateCudaOps
// must say so.
#include "kernels/cuda/cuda_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/cpu_device.h"
#include "device/cuda/cuda_device.h"
#include "device/device.h"
#include "core/testing/status_matchers.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/heads.h"
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
using cpu::RandomTokens;
using cpu::StorageTypes;
using cpu::ToFloats;
using cpu::ToStorage;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

struct Tolerance {
  float atol, rtol;
};

// Per-op tolerances. Inputs are O(1) (uniform in [-1, 1] unless a test says otherwise).
//
// fp32: the GPU does the reference's fp32 operations, but sums in another order (warp and
// block trees, cuBLAS tiles) and uses CUDA's expf/tanhf/coshf/logf (<= 2 ulp) instead of
// glibc's; both give errors of a few fp32 ulps per term.
//
// bf16: inputs are the same bf16 values on both sides and arithmetic is fp32, so outputs
// differ only where two fp32 results that differ by the fp32 error above round to
// neighbouring bf16 values: at most one bf16 ulp, 2^-8 = 0.39% .. 2^-7 = 0.78% relative,
// hence rtol 1e-2; atol covers results that cancel to near zero.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType kValue = DType::kF32;
  // Add, Accumulate, casts, encoder (fp32 adds in the reference's order), AdamW, the LoRA
  // column-slice ops and dropout (the reference's operations, each rounded, no FMA; dropout's
  // mask is one shared function): bit-identical.
  static constexpr Tolerance kExact{0.0f, 0.0f};
  // GELU, SwiGLU: one tanhf/coshf or expf per element, a few ulps. RoPE: the same fp32 angle
  // on both sides (inv_freq computed on the host as the reference does), then CUDA's sincosf
  // (<= 2 ulp) against glibc's: a few 1e-7 on results of O(1).
  static constexpr Tolerance kElementwise{1e-6f, 1e-5f};
  // Row/column reductions of <= ~1000 O(1) terms (layernorm, RMSNorm, bias grad, softmax).
  static constexpr Tolerance kReduction{1e-5f, 1e-4f};
  // cuBLAS fp32 GEMMs (no TF32), K <= 67 terms of O(1).
  static constexpr Tolerance kMatmul{1e-4f, 1e-4f};
  // Attention: a dot product over hs, then softmax sums over up to T = 77 keys and products
  // with them (backward: two such levels; dk/dv also over the <= 6 query heads of a group).
  static constexpr Tolerance kAttention{5e-5f, 5e-4f};
  static constexpr Tolerance kAttentionGemmGrad = kAttention;
  // Softmax gradients dloss * (p - onehot), p = e^(x - max) / sum over V = 1031 exps (the
  // sum's relative error, a few 1e-6, carries over to every p).
  static constexpr Tolerance kSoftmax{1e-7f, 1e-4f};
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType kValue = DType::kBF16;
  static constexpr Tolerance kExact{0.0f, 0.0f};
  static constexpr Tolerance kElementwise{1e-5f, 1e-2f};
  static constexpr Tolerance kReduction{2e-3f, 1e-2f};
  static constexpr Tolerance kMatmul{2e-3f, 1e-2f};
  static constexpr Tolerance kAttention{2e-3f, 1e-2f};
  // The GEMM attention's dqkv: P and dS rounded to bf16 before their GEMMs (tensor cores),
  // one rounding more than the reference (kernels/attention_gemm_test: within half of this
  // at these shapes).
  static constexpr Tolerance kAttentionGemmGrad{8e-3f, 2e-2f};
  static constexpr Tolerance kSoftmax{1e-7f, 1e-2f};
};

// fp32 statistics and losses (both dtypes: computed in fp32 from the same stored inputs).
constexpr Tolerance kStatsTolerance{1e-5f, 1e-5f};

template <typename T>
class CudaOpsTest : public ::testing::Test {
 protected:
  using Tol = DTypeOf<T>;

  void SetUp() override {
    StatusOr<int> count = CudaDeviceCount();
    if (!count.ok()) GTEST_SKIP() << "no usable GPU: " << count.status();
    if (*count == 0) GTEST_SKIP() << "no usable GPU: cudaGetDeviceCount found 0 devices";
    CudaDeviceOptions options;
    options.device_memory_bytes = 512ull << 20;
    options.host_memory_bytes = 256ull << 20;
    auto device = CreateCudaDevice(options);
    if (device.status().code() == absl::StatusCode::kUnavailable) {
      GTEST_SKIP() << "no usable GPU: " << device.status();
    }
    ASSERT_OK(device);
    device_ = std::move(device).value();
    auto stream = device_->CreateStream("compute");
    ASSERT_OK(stream);
    stream_ = std::move(stream).value();
    auto ops = CreateCudaOps(Tol::kValue);
    ASSERT_OK(ops);
    ops_ = std::move(ops).value();
    ASSERT_EQ(ops_->dtype(), Tol::kValue);
    auto flash = CreateCudaOps(Tol::kValue, CudaAttention::kFlash);
    ASSERT_OK(flash);
    flash_ops_ = std::move(flash).value();
  }

  // A device-tier copy of `values` (at least one element's worth of memory); the buffer
  // lives until the test ends.
  template <typename E>
  E* Upload(const std::vector<E>& values) {
    const size_t bytes = std::max<size_t>(values.size(), 1) * sizeof(E);
    auto buffer = device_->Allocate(Tier::kDevice, StateKind::kActivations, bytes, "test input");
    EXPECT_OK(buffer);
    if (!buffer.ok()) return nullptr;
    E* data = buffer->template as<E>();
    buffers_.push_back(std::move(buffer).value());
    if (!values.empty()) {
      // Through pinned host memory, synchronised, so `values` may go away afterwards.
      auto host = device_->Allocate(Tier::kHost, StateKind::kActivations, bytes, "test staging");
      EXPECT_OK(host);
      if (!host.ok()) return data;
      std::memcpy(host->data(), values.data(), values.size() * sizeof(E));
      const Status copied = device_->CopyAsync(data, host->data(), bytes, *stream_);
      EXPECT_OK(copied);
      const Status synced = stream_->Synchronize();
      EXPECT_OK(synced);
    }
    return data;
  }

  // The first n elements at `data` (device memory), after everything enqueued so far.
  template <typename E>
  std::vector<E> Download(const E* data, size_t n) {
    std::vector<E> out(n);
    if (n == 0) return out;
    const size_t bytes = n * sizeof(E);
    auto host = device_->Allocate(Tier::kHost, StateKind::kActivations, bytes, "test download");
    EXPECT_OK(host);
    if (!host.ok()) return out;
    const Status copied = device_->CopyAsync(host->data(), data, bytes, *stream_);
    EXPECT_OK(copied);
    const Status synced = stream_->Synchronize();
    EXPECT_OK(synced);
    std::memcpy(out.data(), host->data(), bytes);
    return out;
  }

  // Elementwise check of the device array `got` against the reference values `ref`.
  template <typename E>
  void Expect(const E* got, const std::vector<E>& ref, Tolerance tolerance,
              const std::string& what) {
    ExpectAllClose(ToFloats(Download(got, ref.size())), ToFloats(ref), tolerance.atol,
                   tolerance.rtol, what);
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::vector<Buffer> buffers_;
  std::unique_ptr<Ops> ops_;  // destroyed first: it holds cuBLAS handles of the device
  std::unique_ptr<Ops> flash_ops_;  // device.cuda_attention=flash; ops_: gemm, the default
};
TYPED_TEST_SUITE(CudaOpsTest, StorageTypes);

TYPED_TEST(CudaOpsTest, EncoderMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  // V = 11 tokens over 3 * 13 positions: most tokens repeat (the backward's scatter-add);
  // C = 301 spans two 256-channel chunks of the backward.
  const int B = 3, T_len = 13, C = 301, V = 11, N = B * T_len;
  const std::vector<int32_t> tokens = RandomTokens(N, V, 1);
  const std::vector<T> wte = ToStorage<T>(RandomFloats(size_t(V) * C, -1, 1, 2));
  const std::vector<T> wpe = ToStorage<T>(RandomFloats(size_t(T_len) * C, -1, 1, 3));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 4));
  const std::vector<T> dwte0 = ToStorage<T>(RandomFloats(size_t(V) * C, -1, 1, 5));
  const std::vector<T> dwpe0 = ToStorage<T>(RandomFloats(size_t(T_len) * C, -1, 1, 6));

  const int32_t* d_tokens = this->Upload(tokens);
  T* d_out = this->Upload(std::vector<T>(size_t(N) * C));
  T* d_dwte = this->Upload(dwte0);
  T* d_dwpe = this->Upload(dwpe0);
  Stream& s = *this->stream_;
  ASSERT_OK(this->ops_->EncoderForward(s, d_out, d_tokens, this->Upload(wte), this->Upload(wpe), B,
                                       T_len, C));
  ASSERT_OK(
      this->ops_->EncoderBackward(s, d_dwte, d_dwpe, this->Upload(dout), d_tokens, B, T_len, C));

  std::vector<T> out(size_t(N) * C), dwte = dwte0, dwpe = dwpe0;
  cpu::EncoderForwardReference(out.data(), tokens.data(), wte.data(), wpe.data(), B, T_len, C);
  cpu::EncoderBackwardReference(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T_len, C);
  this->Expect(d_out, out, Tol::kExact, "encoder out");  // one add, one rounding
  // Per element the same fp32 adds in the same (b, t) order as the reference.
  this->Expect(d_dwte, dwte, Tol::kExact, "encoder dwte");
  this->Expect(d_dwpe, dwpe, Tol::kExact, "encoder dwpe");

  // No position embedding (LLaMA): wpe and dwpe null.
  T* d_token_rows = this->Upload(std::vector<T>(size_t(N) * C));
  T* d_dwte_only = this->Upload(dwte0);
  ASSERT_OK(this->ops_->EncoderForward(s, d_token_rows, d_tokens, this->Upload(wte), nullptr, B,
                                       T_len, C));
  ASSERT_OK(this->ops_->EncoderBackward(s, d_dwte_only, nullptr, this->Upload(dout), d_tokens, B,
                                        T_len, C));
  std::vector<T> token_rows(size_t(N) * C), dwte_only = dwte0;
  cpu::EncoderForwardReference(token_rows.data(), tokens.data(), wte.data(),
                               static_cast<const T*>(nullptr), B, T_len, C);
  cpu::EncoderBackwardReference(dwte_only.data(), static_cast<T*>(nullptr), dout.data(),
                                tokens.data(), B, T_len, C);
  this->Expect(d_token_rows, token_rows, Tol::kExact, "encoder out without wpe");
  this->Expect(d_dwte_only, dwte_only, Tol::kExact, "encoder dwte without dwpe");
}

TYPED_TEST(CudaOpsTest, LayerNormMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const int N = 37, C = 101;
  // Rows with an offset, so the mean matters.
  const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -0.5f, 1.5f, 7));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 8));
  const std::vector<T> bias = ToStorage<T>(RandomFloats(C, -0.5f, 0.5f, 9));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 10));
  const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 11));
  const std::vector<T> dweight0 = ToStorage<T>(RandomFloats(C, -1, 1, 12));
  const std::vector<T> dbias0 = ToStorage<T>(RandomFloats(C, -1, 1, 13));

  const T* d_inp = this->Upload(inp);
  const T* d_weight = this->Upload(weight);
  T* d_out = this->Upload(std::vector<T>(size_t(N) * C));
  float* d_mean = this->Upload(std::vector<float>(N));
  float* d_rstd = this->Upload(std::vector<float>(N));
  T* d_dinp = this->Upload(dinp0);
  T* d_dweight = this->Upload(dweight0);
  T* d_dbias = this->Upload(dbias0);
  Stream& s = *this->stream_;
  ASSERT_OK(this->ops_->LayerNormForward(s, d_out, d_mean, d_rstd, d_inp, d_weight,
                                         this->Upload(bias), N, C));
  // The backward reads the reference's statistics, so it is checked on its own.
  std::vector<T> out(size_t(N) * C);
  std::vector<float> mean(N), rstd(N);
  cpu::LayerNormForwardReference(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                                 bias.data(), N, C);
  ASSERT_OK(this->ops_->LayerNormBackward(s, d_dinp, d_dweight, d_dbias, this->Upload(dout), d_inp,
                                          d_weight, this->Upload(mean), this->Upload(rstd), N, C));

  std::vector<T> dinp = dinp0, dweight = dweight0, dbias = dbias0;
  cpu::LayerNormBackwardReference(dinp.data(), dweight.data(), dbias.data(), dout.data(),
                                  inp.data(), weight.data(), mean.data(), rstd.data(), N, C);
  this->Expect(d_out, out, Tol::kReduction, "layernorm out");
  this->Expect(d_mean, mean, kStatsTolerance, "layernorm mean");
  this->Expect(d_rstd, rstd, kStatsTolerance, "layernorm rstd");
  this->Expect(d_dinp, dinp, Tol::kReduction, "layernorm dinp");
  this->Expect(d_dweight, dweight, Tol::kReduction, "layernorm dweight (sum over 37 rows)");
  this->Expect(d_dbias, dbias, Tol::kReduction, "layernorm dbias (sum over 37 rows)");
}

TYPED_TEST(CudaOpsTest, MatmulMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const int N = 37, C = 67, OC = 45;
  const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 14));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(size_t(OC) * C, -0.3f, 0.3f, 15));
  const std::vector<T> bias = ToStorage<T>(RandomFloats(OC, -0.5f, 0.5f, 16));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * OC, -1, 1, 17));
  const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 18));
  const std::vector<T> dweight0 = ToStorage<T>(RandomFloats(size_t(OC) * C, -1, 1, 19));
  const std::vector<T> dbias0 = ToStorage<T>(RandomFloats(OC, -1, 1, 20));

  const T* d_inp = this->Upload(inp);
  const T* d_weight = this->Upload(weight);
  const T* d_dout = this->Upload(dout);
  T* d_out = this->Upload(std::vector<T>(size_t(N) * OC));
  T* d_out_no_bias = this->Upload(std::vector<T>(size_t(N) * OC));
  T* d_dinp = this->Upload(dinp0);
  T* d_dweight = this->Upload(dweight0);
  T* d_dbias = this->Upload(dbias0);
  T* d_dweight_only = this->Upload(dweight0);  // dinp and dbias null: skipped
  T* d_dinp_frozen = this->Upload(dinp0);      // dweight null (a frozen weight): skipped
  T* d_dbias_frozen = this->Upload(dbias0);
  Stream& s = *this->stream_;
  Ops& ops = *this->ops_;
  ASSERT_OK(ops.MatmulForward(s, d_out, d_inp, d_weight, this->Upload(bias), N, C, OC));
  ASSERT_OK(ops.MatmulForward(s, d_out_no_bias, d_inp, d_weight, nullptr, N, C, OC));
  ASSERT_OK(ops.MatmulBackward(s, d_dinp, d_dweight, d_dbias, d_dout, d_inp, d_weight, N, C, OC));
  ASSERT_OK(
      ops.MatmulBackward(s, nullptr, d_dweight_only, nullptr, d_dout, d_inp, d_weight, N, C, OC));
  ASSERT_OK(ops.MatmulBackward(s, d_dinp_frozen, nullptr, d_dbias_frozen, d_dout, d_inp, d_weight,
                               N, C, OC));

  std::vector<T> out(size_t(N) * OC), out_no_bias(size_t(N) * OC);
  cpu::MatmulForwardReference(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  cpu::MatmulForwardReference(out_no_bias.data(), inp.data(), weight.data(),
                              static_cast<const T*>(nullptr), N, C, OC);
  std::vector<T> dinp = dinp0, dweight = dweight0, dbias = dbias0, dweight_only = dweight0;
  cpu::MatmulBackwardReference(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                               weight.data(), N, C, OC);
  cpu::MatmulBackwardReference(static_cast<T*>(nullptr), dweight_only.data(),
                               static_cast<T*>(nullptr), dout.data(), inp.data(), weight.data(), N,
                               C, OC);
  this->Expect(d_out, out, Tol::kMatmul, "matmul out (with bias)");
  this->Expect(d_out_no_bias, out_no_bias, Tol::kMatmul, "matmul out (no bias)");
  this->Expect(d_dinp, dinp, Tol::kMatmul, "matmul dinp");
  this->Expect(d_dweight, dweight, Tol::kMatmul, "matmul dweight");
  this->Expect(d_dbias, dbias, Tol::kReduction, "matmul dbias (sum over 37 rows)");
  this->Expect(d_dweight_only, dweight_only, Tol::kMatmul, "matmul dweight (dinp, dbias null)");
  // A null dweight leaves dinp and dbias as they are with one: the same GEMM and column sums
  // on the same stream, deterministic, so the same bits.
  this->Expect(d_dinp_frozen, this->Download(d_dinp, dinp.size()), Tolerance{0.0f, 0.0f},
               "matmul dinp (dweight null) vs with dweight");
  this->Expect(d_dbias_frozen, this->Download(d_dbias, dbias.size()), Tolerance{0.0f, 0.0f},
               "matmul dbias (dweight null) vs with dweight");
  this->Expect(d_dinp_frozen, dinp, Tol::kMatmul, "matmul dinp (dweight null)");
}

TYPED_TEST(CudaOpsTest, AttentionMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  struct Shape {
    int B, T, C, NH, NKV;
  };
  // Multi-head (NKV == NH): hs = 13 (odd: shared-memory rows of odd stride), 64 (GPT-2) over
  // three 32-row tiles with a partial last one, and 128 (the largest supported; over 48 KiB
  // of shared memory). Grouped-query: 6 query heads on 2 key/value heads (groups of 3) at
  // hs = 13, on 3 (groups of 2) at hs = 64, and on 1 (multi-query) at hs = 128.
  // Each shape through both implementations (GEMMs on tensor cores, and the flash kernels),
  // and a head size over the flash kernels' limit (160) through the GEMMs only.
  for (const auto& [shape, ops] :
       std::vector<std::pair<Shape, Ops*>>{{Shape{2, 45, 39, 3, 3}, this->ops_.get()},
                                           {Shape{1, 77, 128, 2, 2}, this->ops_.get()},
                                           {Shape{2, 33, 128, 1, 1}, this->ops_.get()},
                                           {Shape{2, 45, 78, 6, 2}, this->ops_.get()},
                                           {Shape{1, 77, 384, 6, 3}, this->ops_.get()},
                                           {Shape{1, 33, 768, 6, 1}, this->ops_.get()},
                                           {Shape{1, 40, 320, 2, 1}, this->ops_.get()},
                                           {Shape{2, 45, 39, 3, 3}, this->flash_ops_.get()},
                                           {Shape{1, 77, 128, 2, 2}, this->flash_ops_.get()},
                                           {Shape{2, 33, 128, 1, 1}, this->flash_ops_.get()},
                                           {Shape{2, 45, 78, 6, 2}, this->flash_ops_.get()},
                                           {Shape{1, 77, 384, 6, 3}, this->flash_ops_.get()},
                                           {Shape{1, 33, 768, 6, 1}, this->flash_ops_.get()}}) {
    const int B = shape.B, T_len = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    const std::string where = "B=" + std::to_string(B) + " T=" + std::to_string(T_len) +
                              " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                              " NKV=" + std::to_string(NKV) +
                              (ops == this->ops_.get() ? " (gemm)" : " (flash)");
    const size_t rows = size_t(B) * T_len, num_stats = size_t(B) * NH * T_len;
    const size_t qkv_width = size_t(C) + 2 * size_t(NKV) * (C / NH);
    const std::vector<T> qkv = ToStorage<T>(RandomFloats(rows * qkv_width, -1, 1, 21));
    const std::vector<T> dout = ToStorage<T>(RandomFloats(rows * C, -1, 1, 22));
    const std::vector<T> dqkv0 = ToStorage<T>(RandomFloats(rows * qkv_width, -1, 1, 23));

    std::vector<T> out(rows * C);
    std::vector<float> stats(num_stats);
    cpu::AttentionForwardReference(out.data(), stats.data(), qkv.data(), B, T_len, C, NH, NKV);
    std::vector<T> dqkv = dqkv0;
    cpu::AttentionBackwardReference(dqkv.data(), dout.data(), qkv.data(), out.data(), stats.data(),
                                    B, T_len, C, NH, NKV);

    const T* d_qkv = this->Upload(qkv);
    T* d_out = this->Upload(std::vector<T>(rows * C));
    float* d_stats = this->Upload(std::vector<float>(num_stats));
    T* d_dqkv = this->Upload(dqkv0);
    T* d_dqkv_again = this->Upload(dqkv0);
    const T* d_dout = this->Upload(dout);
    const T* d_ref_out = this->Upload(out);
    const float* d_ref_stats = this->Upload(stats);
    Stream& s = *this->stream_;
    ASSERT_OK(ops->AttentionForward(s, d_out, d_stats, d_qkv, B, T_len, C, NH, NKV));
    // The backward gets the reference's forward results, so it is checked on its own.
    ASSERT_OK(ops->AttentionBackward(s, d_dqkv, d_dout, d_qkv, d_ref_out, d_ref_stats, B, T_len, C,
                                     NH, NKV));
    ASSERT_OK(ops->AttentionBackward(s, d_dqkv_again, d_dout, d_qkv, d_ref_out, d_ref_stats, B,
                                     T_len, C, NH, NKV));
    this->Expect(d_out, out, Tol::kAttention, "attention out " + where);
    this->Expect(d_stats, stats, kStatsTolerance, "attention stats " + where);
    this->Expect(d_dqkv, dqkv, ops == this->ops_.get() ? Tol::kAttentionGemmGrad : Tol::kAttention,
                 "attention dqkv " + where);
    // Query heads that share a key/value head add into the same dk/dv in a fixed order:
    // a second run gives the same bits.
    this->Expect(d_dqkv_again, this->Download(d_dqkv, dqkv.size()), Tolerance{0.0f, 0.0f},
                 "attention dqkv, second run " + where);
  }
}

// One new token over a KV cache (generation): the CPU reference at T = 1 (itself only),
// a few keys, and a long cache over several passes of the block, multi-head and grouped.
TYPED_TEST(CudaOpsTest, AttentionDecodeMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  struct Shape {
    int T, C, NH, NKV;
  };
  for (const Shape& shape : {Shape{1, 64, 4, 4}, Shape{7, 78, 6, 2}, Shape{700, 256, 4, 1}}) {
    const int T_len = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
    const std::string where = "T=" + std::to_string(T_len) + " C=" + std::to_string(C) +
                              " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV);
    const size_t qkv_width = size_t(C) + 2 * size_t(NKV) * (C / NH);
    const std::vector<T> qkv = ToStorage<T>(RandomFloats(size_t(T_len) * qkv_width, -1, 1, 24));
    std::vector<T> out(C);
    cpu::AttentionDecodeReference(out.data(), qkv.data(), T_len, C, NH, NKV);
    T* d_out = this->Upload(std::vector<T>(C));
    ASSERT_OK(this->ops_->AttentionDecode(*this->stream_, d_out, this->Upload(qkv), T_len, C, NH,
                                          NKV));
    this->Expect(d_out, out, Tol::kAttention, "attention decode " + where);
  }
}

TYPED_TEST(CudaOpsTest, RmsNormMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  constexpr float kEps = 1e-5f;
  struct Shape {
    int N, C;
  };
  // C = 101: under one 256-thread block; C = 1031: four passes of the block over the row.
  for (const Shape& shape : {Shape{37, 101}, Shape{5, 1031}}) {
    const int N = shape.N, C = shape.C;
    const std::string where = "N=" + std::to_string(N) + " C=" + std::to_string(C);
    const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 40));
    const std::vector<T> weight = ToStorage<T>(RandomFloats(C, 0.5f, 1.5f, 41));
    const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 42));
    const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 43));
    const std::vector<T> dweight0 = ToStorage<T>(RandomFloats(C, -1, 1, 44));

    const T* d_inp = this->Upload(inp);
    const T* d_weight = this->Upload(weight);
    T* d_out = this->Upload(std::vector<T>(size_t(N) * C));
    float* d_rstd = this->Upload(std::vector<float>(N));
    T* d_dinp = this->Upload(dinp0);
    T* d_dweight = this->Upload(dweight0);
    Stream& s = *this->stream_;
    ASSERT_OK(this->ops_->RmsNormForward(s, d_out, d_rstd, d_inp, d_weight, N, C, kEps));
    // The backward reads the reference's rstd, so it is checked on its own.
    std::vector<T> out(size_t(N) * C);
    std::vector<float> rstd(N);
    cpu::RmsNormForwardReference(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
    ASSERT_OK(this->ops_->RmsNormBackward(s, d_dinp, d_dweight, this->Upload(dout), d_inp, d_weight,
                                          this->Upload(rstd), N, C));

    std::vector<T> dinp = dinp0, dweight = dweight0;
    cpu::RmsNormBackwardReference(dinp.data(), dweight.data(), dout.data(), inp.data(),
                                  weight.data(), rstd.data(), N, C);
    this->Expect(d_out, out, Tol::kReduction, "rmsnorm out " + where);
    this->Expect(d_rstd, rstd, kStatsTolerance, "rmsnorm rstd " + where);
    this->Expect(d_dinp, dinp, Tol::kReduction, "rmsnorm dinp " + where);
    this->Expect(d_dweight, dweight, Tol::kReduction, "rmsnorm dweight (column sums) " + where);
  }
}

// CopyHeads both ways (Qwen3's q/k norm rows): bit for bit the reference's, the other heads
// of qkv untouched.
TYPED_TEST(CudaOpsTest, CopyHeadsMatchesReference) {
  struct Shape {
    int N, heads_per_row, first, count, hs;
  };
  for (const Shape& shape :
       {Shape{37, 8, 0, 4, 128}, Shape{37, 8, 4, 2, 128}, Shape{5, 3, 1, 1, 6}}) {
    const std::string where =
        "N=" + std::to_string(shape.N) + " heads=" + std::to_string(shape.heads_per_row) +
        " first=" + std::to_string(shape.first) + " count=" + std::to_string(shape.count);
    const size_t qkv_n = size_t(shape.N) * shape.heads_per_row * shape.hs;
    const size_t rows_n = size_t(shape.N) * shape.count * shape.hs;
    const std::vector<TypeParam> qkv = ToStorage<TypeParam>(RandomFloats(qkv_n, -1, 1, 46));
    const std::vector<TypeParam> rows = ToStorage<TypeParam>(RandomFloats(rows_n, -1, 1, 47));
    TypeParam* d_qkv = this->Upload(qkv);
    TypeParam* d_rows = this->Upload(std::vector<TypeParam>(rows_n));
    TypeParam* d_back = this->Upload(qkv);
    TypeParam* d_source = this->Upload(rows);
    Stream& s = *this->stream_;
    ASSERT_OK(this->ops_->CopyHeads(s, d_qkv, d_rows, shape.N, shape.heads_per_row, shape.first,
                                    shape.count, shape.hs, true));
    ASSERT_OK(this->ops_->CopyHeads(s, d_back, d_source, shape.N, shape.heads_per_row, shape.first,
                                    shape.count, shape.hs, false));
    std::vector<TypeParam> want_rows(rows_n), want_back = qkv, source = rows, from = qkv;
    cpu::CopyHeadsReference(from.data(), want_rows.data(), shape.N, shape.heads_per_row,
                            shape.first, shape.count, shape.hs, true);
    cpu::CopyHeadsReference(want_back.data(), source.data(), shape.N, shape.heads_per_row,
                            shape.first, shape.count, shape.hs, false);
    const std::vector<TypeParam> got_rows = this->Download(d_rows, rows_n);
    const std::vector<TypeParam> got_back = this->Download(d_back, qkv_n);
    EXPECT_EQ(std::memcmp(got_rows.data(), want_rows.data(), rows_n * sizeof(TypeParam)), 0)
        << "copy heads to rows " << where;
    EXPECT_EQ(std::memcmp(got_back.data(), want_back.data(), qkv_n * sizeof(TypeParam)), 0)
        << "copy rows to heads " << where;
  }
}

TYPED_TEST(CudaOpsTest, RopeMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  struct Shape {
    int B, T, NH, NKV, hs, position0;
    RopeSpec rope;
  };
  // hs = 14 (7 pairs, odd) with grouped heads from position 0; hs = 128 (LLaMA) from
  // position 1000 with Llama 3.1's theta and scaling, where angles reach ~1e3 rad;
  // multi-head hs = 256, the largest the kernel takes.
  const RopeSpec llama31{500000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  for (const Shape& shape :
       {Shape{2, 13, 6, 2, 14, 0, RopeSpec{}}, Shape{1, 37, 6, 3, 128, 1000, llama31},
        Shape{1, 5, 3, 3, 256, 7, RopeSpec{}}}) {
    const int B = shape.B, T_len = shape.T, NH = shape.NH, NKV = shape.NKV, hs = shape.hs;
    const std::string where = "B=" + std::to_string(B) + " T=" + std::to_string(T_len) +
                              " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV) +
                              " hs=" + std::to_string(hs) +
                              " position0=" + std::to_string(shape.position0);
    const size_t n = size_t(B) * T_len * (NH + 2 * NKV) * hs;
    const std::vector<T> qkv = ToStorage<T>(RandomFloats(n, -1, 1, 45));
    T* d_forward = this->Upload(qkv);
    T* d_backward = this->Upload(qkv);
    Stream& s = *this->stream_;
    ASSERT_OK(
        this->ops_->RopeForward(s, d_forward, B, T_len, NH, NKV, hs, shape.rope, shape.position0));
    ASSERT_OK(this->ops_->RopeBackward(s, d_backward, B, T_len, NH, NKV, hs, shape.rope,
                                       shape.position0));
    std::vector<T> forward = qkv, backward = qkv;
    cpu::RopeReference(forward.data(), B, T_len, NH, NKV, hs, shape.rope, shape.position0, +1);
    cpu::RopeReference(backward.data(), B, T_len, NH, NKV, hs, shape.rope, shape.position0, -1);
    this->Expect(d_forward, forward, Tol::kElementwise, "rope forward " + where);
    this->Expect(d_backward, backward, Tol::kElementwise, "rope backward " + where);
    // v is not rotated: its bits stay as they were.
    const std::vector<T> got = this->Download(d_forward, n);
    for (size_t row = 0; row < size_t(B) * T_len; ++row) {
      const size_t row_begin = row * (NH + 2 * NKV) * hs;
      for (size_t i = size_t(NH + NKV) * hs; i < size_t(NH + 2 * NKV) * hs; ++i) {
        ASSERT_EQ(std::memcmp(&got[row_begin + i], &qkv[row_begin + i], sizeof(T)), 0)
            << "rope changed v, row " << row << " channel " << i << " " << where;
      }
    }
  }
}

TYPED_TEST(CudaOpsTest, SwiGluMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const int N = 37, F = 101;
  // Gates over [-8, 8]: both tails of the sigmoid and the curved middle.
  std::vector<float> inp_values = RandomFloats(size_t(N) * 2 * F, -1, 1, 46);
  const std::vector<float> gates = RandomFloats(size_t(N) * F, -8, 8, 47);
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < F; ++i) inp_values[size_t(n) * 2 * F + i] = gates[size_t(n) * F + i];
  }
  const std::vector<T> inp = ToStorage<T>(inp_values);
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * F, -1, 1, 48));
  const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(size_t(N) * 2 * F, -1, 1, 49));

  const T* d_inp = this->Upload(inp);
  T* d_out = this->Upload(std::vector<T>(size_t(N) * F));
  T* d_dinp = this->Upload(dinp0);
  Stream& s = *this->stream_;
  ASSERT_OK(this->ops_->SwiGluForward(s, d_out, d_inp, N, F));
  ASSERT_OK(this->ops_->SwiGluBackward(s, d_dinp, d_inp, this->Upload(dout), N, F));

  std::vector<T> out(size_t(N) * F), dinp = dinp0;
  cpu::SwiGluForwardReference(out.data(), inp.data(), N, F);
  cpu::SwiGluBackwardReference(dinp.data(), inp.data(), dout.data(), N, F);
  this->Expect(d_out, out, Tol::kElementwise, "swiglu out");
  this->Expect(d_dinp, dinp, Tol::kElementwise, "swiglu dinp (gate | up)");
}

TYPED_TEST(CudaOpsTest, ElementwiseOpsMatchReferences) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const size_t n = 1001;
  // GELU over [-6, 6]: both tails and the curved middle.
  const std::vector<T> x = ToStorage<T>(RandomFloats(n, -6, 6, 24));
  const std::vector<T> y = ToStorage<T>(RandomFloats(n, -1, 1, 25));
  const std::vector<T> dinp0 = ToStorage<T>(RandomFloats(n, -1, 1, 26));
  const std::vector<float> accumulator0 = RandomFloats(n, -1, 1, 27);

  const T* d_x = this->Upload(x);
  const T* d_y = this->Upload(y);
  T* d_gelu = this->Upload(std::vector<T>(n));
  T* d_dinp = this->Upload(dinp0);
  T* d_sum = this->Upload(std::vector<T>(n));
  T* d_aliased = this->Upload(x);  // out aliases a
  T* d_accumulated = this->Upload(y);
  float* d_accumulator = this->Upload(accumulator0);
  Stream& s = *this->stream_;
  Ops& ops = *this->ops_;
  ASSERT_OK(ops.GeluForward(s, d_gelu, d_x, n));
  ASSERT_OK(ops.GeluBackward(s, d_dinp, d_x, d_y, n));
  ASSERT_OK(ops.Add(s, d_sum, d_x, d_y, n));
  ASSERT_OK(ops.Add(s, d_aliased, d_aliased, d_y, n));
  ASSERT_OK(ops.Accumulate(s, d_accumulated, d_x, n));
  ASSERT_OK(ops.AccumulateToFloat(s, d_accumulator, d_x, n));

  std::vector<T> gelu(n), dinp = dinp0, sum(n), accumulated = y;
  std::vector<float> accumulator = accumulator0;
  cpu::GeluForwardReference(gelu.data(), x.data(), n);
  cpu::GeluBackwardReference(dinp.data(), x.data(), y.data(), n);
  cpu::AddReference(sum.data(), x.data(), y.data(), n);
  cpu::AccumulateReference(accumulated.data(), x.data(), n);
  cpu::AccumulateToFloatReference(accumulator.data(), x.data(), n);
  this->Expect(d_gelu, gelu, Tol::kElementwise, "gelu out");
  this->Expect(d_dinp, dinp, Tol::kElementwise, "gelu dinp");
  // One fp32 add and one rounding per element on both sides: bit-identical.
  this->Expect(d_sum, sum, Tol::kExact, "add");
  this->Expect(d_aliased, sum, Tol::kExact, "add with out == a");
  this->Expect(d_accumulated, accumulated, Tol::kExact, "accumulate");
  this->Expect(d_accumulator, accumulator, Tolerance{0.0f, 0.0f}, "accumulate to float");
}

// The LoRA column-slice ops: the odd shape of the op's documentation, a slice from column 0
// to the row's end, a single column, and 86,339 elements over 338 blocks whose edges fall
// mid-row. Outside the slice, dst keeps the prefill (the reference's copy of it, compared
// whole); ScaledColumns overwrites its prefilled dst.
TYPED_TEST(CudaOpsTest, LoraColumnOpsMatchReferences) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  struct Slice {
    int N, cols, col, n;
  };
  const float alpha = 0.75f;
  for (const Slice& c : {Slice{5, 13, 4, 7}, Slice{3, 9, 0, 9}, Slice{4, 11, 5, 1},
                         Slice{167, 1031, 300, 517}}) {
    const std::string where = "N=" + std::to_string(c.N) + " cols=" + std::to_string(c.cols) +
                              " col=" + std::to_string(c.col) + " n=" + std::to_string(c.n);
    const std::vector<T> dst0 = ToStorage<T>(RandomFloats(size_t(c.N) * c.cols, -1, 1, 39));
    const std::vector<T> lora_out = ToStorage<T>(RandomFloats(size_t(c.N) * c.n, -1, 1, 40));
    const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(c.N) * c.cols, -1, 1, 41));
    const std::vector<T> dlora0 = ToStorage<T>(RandomFloats(size_t(c.N) * c.n, -1, 1, 42));
    T* d_dst = this->Upload(dst0);
    T* d_dlora = this->Upload(dlora0);
    Stream& s = *this->stream_;
    ASSERT_OK(this->ops_->AddScaledColumns(s, d_dst, c.cols, c.col, this->Upload(lora_out), c.N,
                                           c.n, alpha));
    ASSERT_OK(
        this->ops_->ScaledColumns(s, d_dlora, this->Upload(dout), c.cols, c.col, c.N, c.n, alpha));
    std::vector<T> dst = dst0, dlora = dlora0;
    cpu::AddScaledColumnsReference(dst.data(), c.cols, c.col, lora_out.data(), c.N, c.n, alpha);
    cpu::ScaledColumnsReference(dlora.data(), dout.data(), c.cols, c.col, c.N, c.n, alpha);
    // The reference's fp32 product and sum, each rounded (__fmul_rn, __fadd_rn): bit-identical.
    this->Expect(d_dst, dst, Tol::kExact, "add scaled columns " + where);
    this->Expect(d_dlora, dlora, Tol::kExact, "scaled columns " + where);
  }
}

// Dropout against the CPU reference, exact: the same mask (kernels/dropout_mask.h on both
// sides) and the same fp32 quotient and sum, each rounded (__fdiv_rn, __fadd_rn). Shapes: odd
// ones with a partial last sample row, one position per sample row, and 1e5 elements over
// 391 blocks far from row 0 (p = 0.25 there: the dropped fraction within 5 binomial standard
// deviations, 0.0068, of p); p = 0 is a plain copy (or add); overwriting and accumulating
// into a prefill; two sample rows as one call and as two (row0 = 0 and 1) draw the same bits;
// another key draws another mask.
TYPED_TEST(CudaOpsTest, DropoutMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  struct Shape {
    int N, C, T_len;
    int64_t row0;
    float p;
  };
  const uint64_t key = 0x5eed0f10aull;
  Stream& s = *this->stream_;
  for (const Shape& d :
       {Shape{5, 13, 3, 0, 0.1f}, Shape{14, 7, 7, 3, 0.5f}, Shape{9, 1, 1, 11, 0.875f},
        Shape{4, 29, 2, 0, 0.0f}, Shape{250, 400, 25, 1000003, 0.25f}}) {
    const size_t n = size_t(d.N) * d.C;
    const std::vector<T> in = ToStorage<T>(RandomFloats(n, 0.25f, 2.0f, 43));  // never 0
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(n, -1, 1, 44));
    const T* d_in = this->Upload(in);
    for (bool accumulate : {false, true}) {
      const std::string where = "N=" + std::to_string(d.N) + " C=" + std::to_string(d.C) +
                                " T=" + std::to_string(d.T_len) +
                                " row0=" + std::to_string(d.row0) + " p=" + std::to_string(d.p) +
                                (accumulate ? " accumulate" : "");
      T* d_out = this->Upload(prefill);
      ASSERT_OK(
          this->ops_->Dropout(s, d_out, d_in, d.N, d.C, d.T_len, d.row0, d.p, key, accumulate));
      std::vector<T> out = prefill;
      cpu::DropoutReference(out.data(), in.data(), d.N, d.C, d.T_len, d.row0, d.p, key, accumulate);
      this->Expect(d_out, out, Tol::kExact, "dropout " + where);
      if (accumulate) continue;
      size_t dropped = 0;
      for (size_t at = 0; at < n; ++at) dropped += Load(&out[at]) == 0.0f ? 1 : 0;
      if (d.p == 0.0f) {
        EXPECT_EQ(ToFloats(this->Download(d_out, n)), ToFloats(in)) << "p = 0 copies " << where;
      } else if (n >= 100000) {
        EXPECT_LT(std::fabs(double(dropped) / n - d.p), 5 * std::sqrt(d.p * (1.0 - d.p) / n))
            << where << ": dropped " << dropped;
      }
    }
  }
  // Two sample rows of 7 positions: one call, and two calls at row0 = 0 and row0 = 1.
  const int T_len = 7, C = 13;
  const size_t sample = size_t(T_len) * C;
  const std::vector<T> in = ToStorage<T>(RandomFloats(2 * sample, 0.25f, 2.0f, 45));
  const T* d_in = this->Upload(in);
  T* d_whole = this->Upload(std::vector<T>(2 * sample));
  T* d_split = this->Upload(std::vector<T>(2 * sample));
  T* d_other_key = this->Upload(std::vector<T>(2 * sample));
  ASSERT_OK(this->ops_->Dropout(s, d_whole, d_in, 2 * T_len, C, T_len, 0, 0.5f, key, false));
  ASSERT_OK(this->ops_->Dropout(s, d_split, d_in, T_len, C, T_len, 0, 0.5f, key, false));
  ASSERT_OK(this->ops_->Dropout(s, d_split + sample, d_in + sample, T_len, C, T_len, 1, 0.5f, key,
                                false));
  ASSERT_OK(
      this->ops_->Dropout(s, d_other_key, d_in, 2 * T_len, C, T_len, 0, 0.5f, key + 1, false));
  const std::vector<float> whole = ToFloats(this->Download(d_whole, 2 * sample));
  EXPECT_EQ(ToFloats(this->Download(d_split, 2 * sample)), whole) << "split over two calls";
  EXPECT_NE(ToFloats(this->Download(d_other_key, 2 * sample)), whole) << "another key";
  std::vector<T> ref(2 * sample);
  cpu::DropoutReference(ref.data(), in.data(), 2 * T_len, C, T_len, 0, 0.5f, key, false);
  EXPECT_EQ(whole, ToFloats(ref));
}

TYPED_TEST(CudaOpsTest, CastsRoundLikeTheHost) {
  using T = TypeParam;
  std::vector<float> values = RandomFloats(997, -100, 100, 28);
  // bf16 ties: 1 + 2^-8 rounds down to 1 (even), 1 + 3 * 2^-8 up to 1 + 2^-6 (even);
  // and values beyond bf16's precision, zero, a negative zero, a subnormal, infinity.
  for (float special : {1.00390625f, 1.01171875f, -1.00390625f, 3.14159265f, 0.0f, -0.0f, 1e-40f,
                        65504.5f, INFINITY, -INFINITY}) {
    values.push_back(special);
  }
  const size_t n = values.size();
  const std::vector<T> stored = ToStorage<T>(RandomFloats(n, -100, 100, 29));
  T* d_cast = this->Upload(std::vector<T>(n));
  float* d_back = this->Upload(std::vector<float>(n));
  Stream& s = *this->stream_;
  ASSERT_OK(this->ops_->CastFromFloat(s, d_cast, this->Upload(values), n));
  ASSERT_OK(this->ops_->CastToFloat(s, d_back, this->Upload(stored), n));
  std::vector<T> cast(n);
  std::vector<float> back(n);
  cpu::CastFromFloatReference(cast.data(), values.data(), n);
  cpu::CastToFloatReference(back.data(), stored.data(), n);
  // Bit-identical: compare the stored bits, not just the values (covers -0 and inf).
  const std::vector<T> got_cast = this->Download(d_cast, n);
  const std::vector<float> got_back = this->Download(d_back, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&got_cast[i], &cast[i], sizeof(T)), 0)
        << "CastFromFloat of " << values[i] << " (element " << i << "): got " << Load(&got_cast[i])
        << ", want " << Load(&cast[i]);
    ASSERT_EQ(std::memcmp(&got_back[i], &back[i], sizeof(float)), 0)
        << "CastToFloat, element " << i << ": got " << got_back[i] << ", want " << back[i];
  }
}

TYPED_TEST(CudaOpsTest, SoftmaxCrossEntropyMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const int N = 7, V = 1031;
  const std::vector<int32_t> targets = RandomTokens(N, V, 31);
  const int32_t* d_targets = this->Upload(targets);
  // Vp == V, and a padded vocabulary (row stride Vp) whose padding holds logits of 50, far
  // above the real ones: a kernel that let them into the softmax would get other losses.
  for (int Vp : {V, V + 69}) {
    std::vector<float> logit_values = RandomFloats(size_t(N) * Vp, -4, 4, 30);
    for (int n = 0; n < N; ++n) {
      for (int i = V; i < Vp; ++i) logit_values[size_t(n) * Vp + i] = 50.0f;
    }
    const std::vector<T> logits = ToStorage<T>(logit_values);
    for (float dloss : {0.0f, 1.0f / 7}) {
      const std::string where = "V=" + std::to_string(V) + " Vp=" + std::to_string(Vp) +
                                " dloss=" + std::to_string(dloss);
      T* d_logits = this->Upload(logits);
      float* d_losses = this->Upload(std::vector<float>(N, -1.0f));
      ASSERT_OK(this->ops_->SoftmaxCrossEntropy(*this->stream_, d_losses, d_logits, d_targets, N, V,
                                                Vp, dloss));
      std::vector<T> dlogits = logits;
      std::vector<float> losses(N);
      cpu::SoftmaxCrossEntropyReference(losses.data(), dlogits.data(), targets.data(), N, V, Vp,
                                        dloss);
      // fp32 losses: log of a sum of 1031 exps in another order.
      this->Expect(d_losses, losses, kStatsTolerance, "losses " + where);
      // With dloss == 0 the logits are untouched (exact); otherwise gradients of O(dloss / V).
      this->Expect(d_logits, dlogits, dloss == 0.0f ? Tol::kExact : Tol::kSoftmax,
                   "logits " + where);
      if (dloss == 0.0f || Vp == V) continue;
      // The gradient of the padding is exactly 0 (+0, as the stores of 0.0f).
      const std::vector<T> got = this->Download(d_logits, size_t(N) * Vp);
      const T zero = ToStorage<T>({0.0f})[0];
      for (int n = 0; n < N; ++n) {
        for (int i = V; i < Vp; ++i) {
          ASSERT_EQ(std::memcmp(&got[size_t(n) * Vp + i], &zero, sizeof(T)), 0)
              << "padding logit " << n << "," << i << " is " << Load(&got[size_t(n) * Vp + i])
              << ", not 0 (" << where << ")";
        }
      }
    }
  }
}

// A quantized base's pieces (nf4, int8, bf16) decode to cpu::DequantizePiece's values, rounded
// once to the dtype, bit for bit (no FMA on either side): sizes with a padded block, an odd
// last byte, several thread blocks and two absmax groups; a zero block and NF4 ties.
TYPED_TEST(CudaOpsTest, DequantizationMatchesTheHostReference) {
  using T = TypeParam;
  for (size_t n : {size_t{1}, size_t{101}, size_t{4096 + 17}, size_t{300 * 64 + 29}}) {
    std::vector<float> x = RandomFloats(n, -3, 3, static_cast<uint32_t>(33 + n));
    for (size_t i = 64; i < std::min(n, size_t{128}); ++i) x[i] = 0.0f;  // a zero block
    if (n > 256) {  // block 2: absmax 1, the others on NF4 decision points
      x[128] = 1.0f;
      for (size_t i = 129; i < 192; ++i) x[i] = cpu::Nf4Midpoints()[i % 15];
    }
    for (BaseDType dtype : {BaseDType::kNF4, BaseDType::kInt8, BaseDType::kBF16}) {
      const std::string where = std::string(BaseDTypeName(dtype)) + " n=" + std::to_string(n);
      const QuantPiece layout = PieceLayout(dtype, n);
      std::vector<uint8_t> host_piece(layout.bytes);
      ASSERT_OK(cpu::QuantizePiece(dtype, x.data(), n, host_piece.data()));
      std::vector<float> expected(n);
      cpu::DequantizePiece(dtype, host_piece.data(), n, expected.data());
      const uint8_t* piece = this->Upload(host_piece);
      T* d_out = this->Upload(std::vector<T>(n));
      Stream& s = *this->stream_;
      if (dtype == BaseDType::kNF4) {
        ASSERT_OK(this->ops_->DequantizeNf4(s, d_out, piece + layout.codes, piece + layout.absmax,
                                            reinterpret_cast<const float*>(piece + layout.absmax2),
                                            reinterpret_cast<const float*>(piece + layout.offset),
                                            n));
      } else if (dtype == BaseDType::kInt8) {
        ASSERT_OK(this->ops_->DequantizeInt8(
            s, d_out, reinterpret_cast<const int8_t*>(piece + layout.codes),
            reinterpret_cast<const float*>(piece + layout.absmax), n));
      } else {
        ASSERT_OK(this->ops_->WidenBf16(s, d_out,
                                        reinterpret_cast<const bf16*>(piece + layout.codes), n));
      }
      const std::vector<T> want = ToStorage<T>(expected);
      const std::vector<T> got = this->Download(d_out, n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
            << where << ", element " << i << ": got " << Load(&got[i]) << ", want "
            << Load(&want[i]);
      }
    }
  }
}

TYPED_TEST(CudaOpsTest, SumSquaresMatchesReference) {
  // 100003 floats: more than the 256 x 256 threads of the partial-sum grid, not a multiple.
  for (size_t n : {size_t{0}, size_t{1}, size_t{100003}}) {
    const std::vector<float> x = RandomFloats(n, -1, 1, 32);
    float* d_result = this->Upload(std::vector<float>(1, -1.0f));
    ASSERT_OK(this->ops_->SumSquares(*this->stream_, d_result, this->Upload(x), n));
    float sum = 0.0f;
    cpu::SumSquaresReference(&sum, x.data(), n);
    // fp64 sums in two orders, each rounded to fp32 once: at most one fp32 ulp apart.
    this->Expect(d_result, std::vector<float>{sum}, Tolerance{0.0f, 2.4e-7f},
                 "sum of squares of " + std::to_string(n));
  }
}

TYPED_TEST(CudaOpsTest, AdamWMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const size_t n = 10007;
  const std::vector<float> master0 = RandomFloats(n, -1, 1, 33);
  const std::vector<float> grad1 = RandomFloats(n, -1, 1, 34), grad2 = RandomFloats(n, -1, 1, 35);
  const std::vector<float> zeros(n, 0.0f);
  float* d_master = this->Upload(master0);
  float* d_m = this->Upload(zeros);
  float* d_v = this->Upload(zeros);
  T* d_param = this->Upload(std::vector<T>(n));
  AdamParams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;  // as after global-norm clipping
  Stream& s = *this->stream_;
  // Step 1 writes the compute-dtype param; step 2 skips it (null), leaving step 1's values.
  hp.step = 1;
  ASSERT_OK(this->ops_->AdamW(s, d_param, d_master, this->Upload(grad1), d_m, d_v, n, hp));
  hp.step = 2;
  ASSERT_OK(this->ops_->AdamW(s, nullptr, d_master, this->Upload(grad2), d_m, d_v, n, hp));

  std::vector<float> master = master0, m = zeros, v = zeros;
  std::vector<T> param(n);
  hp.step = 1;
  cpu::AdamWReference(param.data(), master.data(), grad1.data(), m.data(), v.data(), n, hp);
  hp.step = 2;
  cpu::AdamWReference(static_cast<T*>(nullptr), master.data(), grad2.data(), m.data(), v.data(), n,
                      hp);
  // The reference's fp32 operations in its order, each correctly rounded on both sides
  // (the CPU build has no FMA contraction; the kernel uses __f*_rn): bit-identical.
  this->Expect(d_master, master, Tolerance{0.0f, 0.0f}, "adamw master");
  this->Expect(d_m, m, Tolerance{0.0f, 0.0f}, "adamw m");
  this->Expect(d_v, v, Tolerance{0.0f, 0.0f}, "adamw v");
  this->Expect(d_param, param, Tol::kExact, "adamw param (from step 1)");
}

// 8-bit Adam states: three steps over 4 blocks and a tail (one block of zero moments and zero
// gradient, block scales from 1e-6 to 1), against cpu::Adam8bitReference, every array bit for
// bit (specification: docs/quantization.md "8-bit Adam states").
TYPED_TEST(CudaOpsTest, AdamW8bitMatchesReference) {
  using T = TypeParam;
  using Tol = DTypeOf<T>;
  const size_t n = 4 * kAdamStateBlock + 777, blocks = cpu::Adam8bitBlocks(n);
  std::vector<float> master = RandomFloats(n, -1, 1, 41);
  std::vector<float> m0 = RandomFloats(n, -1, 1, 42), v0 = RandomFloats(n, 0, 1, 43);
  std::vector<std::vector<float>> grads = {RandomFloats(n, -1, 1, 44), RandomFloats(n, -1, 1, 45),
                                           RandomFloats(n, -1, 1, 46)};
  for (size_t i = 0; i < n; ++i) {
    const size_t block = i / kAdamStateBlock;
    const float scale = std::pow(10.0f, -2.0f * static_cast<float>(block % 4));
    m0[i] *= 0.01f * scale;
    v0[i] *= 1e-4f * scale;
    if (block == 2) {
      m0[i] = v0[i] = 0.0f;
      for (auto& g : grads) g[i] = 0.0f;
    }
  }
  std::vector<uint8_t> m_codes(n), v_codes(n);
  std::vector<float> m_absmax(blocks), v_absmax(blocks);
  cpu::QuantizeMoments(m0.data(), n, true, m_codes.data(), m_absmax.data());
  cpu::QuantizeMoments(v0.data(), n, false, v_codes.data(), v_absmax.data());
  float* d_master = this->Upload(master);
  uint8_t* d_m_codes = this->Upload(m_codes);
  uint8_t* d_v_codes = this->Upload(v_codes);
  float* d_m_absmax = this->Upload(m_absmax);
  float* d_v_absmax = this->Upload(v_absmax);
  T* d_param = this->Upload(std::vector<T>(n));
  std::vector<T> param(n);
  AdamParams hp;
  hp.lr = 3e-3f;
  hp.beta2 = 0.999f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  Stream& s = *this->stream_;
  for (int step = 1; step <= 3; ++step) {
    hp.step = step;
    // The last step skips the param copy (null), leaving step 2's values.
    T* d_out = step < 3 ? d_param : nullptr;
    ASSERT_OK(this->ops_->AdamW8bit(s, d_out, d_master, this->Upload(grads[step - 1]), d_m_codes,
                                    d_m_absmax, d_v_codes, d_v_absmax, n, hp));
    cpu::Adam8bitReference(step < 3 ? param.data() : static_cast<T*>(nullptr), master.data(),
                           grads[step - 1].data(), m_codes.data(), m_absmax.data(),
                           v_codes.data(), v_absmax.data(), n, hp);
  }
  EXPECT_EQ(m_absmax[2], 0.0f);  // the zero block stayed zero
  EXPECT_EQ(this->Download(d_m_codes, n), m_codes);
  EXPECT_EQ(this->Download(d_v_codes, n), v_codes);
  this->Expect(d_m_absmax, m_absmax, Tolerance{0.0f, 0.0f}, "adamw8bit m absmax");
  this->Expect(d_v_absmax, v_absmax, Tolerance{0.0f, 0.0f}, "adamw8bit v absmax");
  this->Expect(d_master, master, Tolerance{0.0f, 0.0f}, "adamw8bit master");
  this->Expect(d_param, param, Tol::kExact, "adamw8bit param (from step 2)");
  hp.step = 0;
  EXPECT_THAT(this->ops_->AdamW8bit(s, nullptr, d_master, d_master, d_m_codes, d_m_absmax,
                                    d_v_codes, d_v_absmax, n, hp),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step=0")));
}

// Moments on and next to the signed map's decision points: with beta1 = beta2 = 0 the gradient
// becomes m exactly, at absmax 1 (on the points: the lower code) and at absmax 3 (within an
// ulp or two of them after y = m * RN(1/3)): the tie rule and the reciprocal of the
// specification, which random moments almost never probe.
TYPED_TEST(CudaOpsTest, AdamW8bitTiesMatchReference) {
  using T = TypeParam;
  const size_t n = 2 * kAdamStateBlock + 1000, blocks = cpu::Adam8bitBlocks(n);
  const std::array<float, 255>& points = cpu::DynamicMapMidpoints(true);
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t local = i % kAdamStateBlock;
    const float near = 3.0f * points[local % 255];
    const int variant = static_cast<int>(local / 255) % 3;
    if (i / kAdamStateBlock == 1) {
      grad[i] = local == 0 ? 3.0f
                           : (variant == 0 ? near
                                           : std::nextafter(near, variant == 1 ? 10.0f : -10.0f));
    } else {
      grad[i] = local == 0 ? 1.0f : points[local % 255];
    }
  }
  std::vector<float> master(n, 0.5f), m_absmax(blocks, 0.0f), v_absmax(blocks, 0.0f);
  std::vector<uint8_t> m_codes(n, 127), v_codes(n, 0);
  float* d_master = this->Upload(master);
  uint8_t* d_m_codes = this->Upload(m_codes);
  uint8_t* d_v_codes = this->Upload(v_codes);
  float* d_m_absmax = this->Upload(m_absmax);
  float* d_v_absmax = this->Upload(v_absmax);
  AdamParams hp;
  hp.beta1 = 0.0f;
  hp.beta2 = 0.0f;
  ASSERT_OK(this->ops_->AdamW8bit(*this->stream_, nullptr, d_master, this->Upload(grad),
                                  d_m_codes, d_m_absmax, d_v_codes, d_v_absmax, n, hp));
  cpu::Adam8bitReference(static_cast<T*>(nullptr), master.data(), grad.data(), m_codes.data(),
                         m_absmax.data(), v_codes.data(), v_absmax.data(), n, hp);
  EXPECT_EQ(m_absmax[1], 3.0f);
  EXPECT_EQ(this->Download(d_m_codes, n), m_codes);
  EXPECT_EQ(this->Download(d_v_codes, n), v_codes);
  this->Expect(d_m_absmax, m_absmax, Tolerance{0.0f, 0.0f}, "ties m absmax");
  this->Expect(d_master, master, Tolerance{0.0f, 0.0f}, "ties master");
}

// A GPU run of everything above on a second stream of the same device: each call must pick
// that stream's cuBLAS handle, and results must be the same bits (deterministic kernels).
TYPED_TEST(CudaOpsTest, SameBitsOnAnotherStream) {
  using T = TypeParam;
  const int N = 37, C = 67, OC = 45;
  const std::vector<T> inp = ToStorage<T>(RandomFloats(size_t(N) * C, -1, 1, 36));
  const std::vector<T> weight = ToStorage<T>(RandomFloats(size_t(OC) * C, -1, 1, 37));
  const std::vector<T> dout = ToStorage<T>(RandomFloats(size_t(N) * OC, -1, 1, 38));
  auto other = this->device_->CreateStream("other");
  ASSERT_OK(other);
  T* d_dbias[2] = {this->Upload(std::vector<T>(OC)), this->Upload(std::vector<T>(OC))};
  T* d_out[2] = {this->Upload(std::vector<T>(size_t(N) * OC)),
                 this->Upload(std::vector<T>(size_t(N) * OC))};
  const T* d_inp = this->Upload(inp);
  const T* d_weight = this->Upload(weight);
  const T* d_dout = this->Upload(dout);
  T* d_dweight = this->Upload(std::vector<T>(size_t(OC) * C));
  Stream* streams[2] = {this->stream_.get(), other->get()};
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(this->ops_->MatmulForward(*streams[i], d_out[i], d_inp, d_weight, nullptr, N, C, OC));
    ASSERT_OK(this->ops_->MatmulBackward(*streams[i], nullptr, d_dweight, d_dbias[i], d_dout, d_inp,
                                         d_weight, N, C, OC));
    ASSERT_OK(streams[i]->Synchronize());
  }
  this->Expect(d_out[1], this->Download(d_out[0], size_t(N) * OC), Tolerance{0.0f, 0.0f},
               "matmul out on the second stream");
  this->Expect(d_dbias[1], this->Download(d_dbias[0], OC), Tolerance{0.0f, 0.0f},
               "dbias on the second stream");
  this->ops_.reset();  // its cuBLAS handles go before the stream they are bound to
}

// Argument checks happen before any CUDA call, so they run without a GPU.
TEST(CudaOps, RejectsBadArgumentsBeforeEnqueueing) {
  StatusOr<std::unique_ptr<Ops>> created = CreateCudaOps(DType::kF32);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(created.status().code(), absl::StatusCode::kUnimplemented) << created.status();
    GTEST_SKIP() << "built without CUDA: " << created.status();
  }
  ASSERT_OK(created);
  Ops& ops = **created;
  EXPECT_EQ(ops.dtype(), DType::kF32);
  // A CPU device's stream: only the last check below gets as far as looking at it.
  std::unique_ptr<Device> cpu_device = CreateCpuDevice(CpuDeviceOptions{});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, cpu_device->CreateStream("compute"));
  float buffer[64] = {};
  int32_t tokens[8] = {};

  const Status bad_heads = ops.AttentionForward(*stream, buffer, buffer, buffer, 1, 2, 13, 3, 3);
  EXPECT_THAT(bad_heads, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NH=3")));
  // Head size 129: over the flash kernels' limit; the GEMM attention (the default) takes it
  // and gets as far as the stream.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Ops> flash,
                       CreateCudaOps(DType::kF32, CudaAttention::kFlash));
  const Status big_heads =
      flash->AttentionBackward(*stream, buffer, buffer, buffer, buffer, buffer, 1, 2, 258, 2, 2);
  EXPECT_THAT(big_heads, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("129")));
  const Status big_heads_gemm =
      ops.AttentionBackward(*stream, buffer, buffer, buffer, buffer, buffer, 1, 2, 258, 2, 2);
  EXPECT_THAT(big_heads_gemm,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CUDA stream")));
  const Status bad_groups = ops.AttentionForward(*stream, buffer, buffer, buffer, 1, 2, 12, 6, 4);
  EXPECT_THAT(bad_groups, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NKV=4")));
  const Status no_kv_heads =
      ops.AttentionBackward(*stream, buffer, buffer, buffer, buffer, buffer, 1, 2, 12, 6, 0);
  EXPECT_THAT(no_kv_heads, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NKV=0")));
  const Status odd_rope = ops.RopeForward(*stream, buffer, 1, 2, 2, 1, 7, RopeSpec{}, 0);
  EXPECT_THAT(odd_rope, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hs=7")));
  const Status rope_groups = ops.RopeForward(*stream, buffer, 1, 2, 3, 2, 8, RopeSpec{}, 0);
  EXPECT_THAT(rope_groups, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NKV=2")));
  const Status big_rope = ops.RopeBackward(*stream, buffer, 1, 2, 2, 1, 258, RopeSpec{}, 0);
  EXPECT_THAT(big_rope, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("258")));
  const Status no_theta = ops.RopeBackward(*stream, buffer, 1, 2, 2, 1, 8, RopeSpec{0.0f}, 0);
  EXPECT_THAT(no_theta, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("theta")));
  const Status rms_negative =
      ops.RmsNormForward(*stream, buffer, buffer, buffer, buffer, 2, -1, 1e-5f);
  EXPECT_THAT(rms_negative, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("C=-1")));
  const Status rms_no_dweight =
      ops.RmsNormBackward(*stream, buffer, nullptr, buffer, buffer, buffer, buffer, 2, 3);
  EXPECT_THAT(rms_no_dweight, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dweight")));
  const Status swiglu_no_input = ops.SwiGluBackward(*stream, buffer, nullptr, buffer, 2, 3);
  EXPECT_THAT(swiglu_no_input, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inp")));
  const Status short_rows =
      ops.SoftmaxCrossEntropy(*stream, buffer, buffer, tokens, 3, 10, 8, 1.0f);
  EXPECT_THAT(short_rows, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Vp=8")));
  const Status negative =
      ops.LayerNormForward(*stream, buffer, buffer, buffer, buffer, buffer, buffer, -1, 13);
  EXPECT_THAT(negative, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("N=-1")));
  const Status past_end = ops.AddScaledColumns(*stream, buffer, 13, 7, buffer, 5, 7, 0.75f);
  EXPECT_THAT(past_end, StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr("AddScaledColumns"), HasSubstr("dst_cols=13"))));
  const Status past_src_end = ops.ScaledColumns(*stream, buffer, buffer, 10, 4, 5, 7, 0.75f);
  EXPECT_THAT(past_src_end, StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("ScaledColumns"), HasSubstr("src_cols=10"))));
  const Status negative_n = ops.AddScaledColumns(*stream, buffer, 13, 4, buffer, 5, -1, 0.75f);
  EXPECT_THAT(negative_n, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n=-1")));
  const Status null_src = ops.ScaledColumns(*stream, buffer, nullptr, 13, 4, 5, 7, 0.75f);
  EXPECT_THAT(null_src, StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr("ScaledColumns"), HasSubstr("src"))));
  const Status dropout_negative = ops.Dropout(*stream, buffer, buffer, -1, 4, 2, 0, 0.5f, 1, false);
  EXPECT_THAT(dropout_negative, StatusIs(absl::StatusCode::kInvalidArgument,
                                         AllOf(HasSubstr("Dropout"), HasSubstr("N=-1"))));
  const Status dropout_row0 = ops.Dropout(*stream, buffer, buffer, 4, 4, 2, -3, 0.5f, 1, false);
  EXPECT_THAT(dropout_row0, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row0=-3")));
  const Status dropout_no_positions =
      ops.Dropout(*stream, buffer, buffer, 4, 4, 0, 0, 0.5f, 1, false);
  EXPECT_THAT(dropout_no_positions, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("T=0")));
  for (float p : {1.0f, -0.25f, NAN}) {
    const Status dropout_p = ops.Dropout(*stream, buffer, buffer, 4, 4, 2, 0, p, 1, false);
    EXPECT_THAT(dropout_p, StatusIs(absl::StatusCode::kInvalidArgument,
                                    AllOf(HasSubstr("Dropout"), HasSubstr("p="))))
        << p;
  }
  const Status dropout_null = ops.Dropout(*stream, buffer, nullptr, 4, 4, 2, 0, 0.5f, 1, true);
  EXPECT_THAT(dropout_null, StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("Dropout"), HasSubstr("null pointer in"))));
  const Status null_input = ops.GeluForward(*stream, buffer, nullptr, 5);
  EXPECT_THAT(null_input, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inp")));
  const Status no_classes =
      ops.SoftmaxCrossEntropy(*stream, buffer, buffer, nullptr, 3, 0, 0, 1.0f);
  EXPECT_EQ(no_classes.code(), absl::StatusCode::kInvalidArgument) << no_classes;
  AdamParams hp;
  hp.step = 0;
  const Status step_zero = ops.AdamW(*stream, nullptr, buffer, buffer, buffer, buffer, 4, hp);
  EXPECT_EQ(step_zero.code(), absl::StatusCode::kInvalidArgument) << step_zero;
  const Status no_result = ops.SumSquares(*stream, nullptr, buffer, 4);
  EXPECT_EQ(no_result.code(), absl::StatusCode::kInvalidArgument) << no_result;
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(buffer);
  const Status no_offset = ops.DequantizeNf4(*stream, buffer, bytes, bytes, buffer, nullptr, 64);
  EXPECT_THAT(no_offset, StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("DequantizeNf4: null pointer offset")));
  // Well-formed, but on a stream of another backend.
  const Status cpu_stream = ops.Add(*stream, buffer, buffer, buffer, 4);
  EXPECT_THAT(cpu_stream,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CUDA stream")));
  // A null wpe / dwpe (no position embedding) is well-formed: only the stream is refused.
  const Status no_wpe = ops.EncoderForward(*stream, buffer, tokens, buffer, nullptr, 1, 2, 3);
  EXPECT_THAT(no_wpe, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CUDA stream")));
  const Status no_dwpe = ops.EncoderBackward(*stream, buffer, nullptr, buffer, tokens, 1, 2, 3);
  EXPECT_THAT(no_dwpe,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CUDA stream")));
  // A null dweight (a frozen weight) is well-formed too.
  const Status no_dweight =
      ops.MatmulBackward(*stream, buffer, nullptr, buffer, buffer, buffer, buffer, 2, 3, 4);
  EXPECT_THAT(no_dweight,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CUDA stream")));
  EXPECT_OK(stream->Synchronize());  // nothing was enqueued
}

}  // namespace
}  // namespace strata
