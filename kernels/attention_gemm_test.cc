// attention_gemm.h's order of GEMMs and row kernels, run with a plain-loop backend (BLAS
// semantics: column-major, fp32 accumulation, each result rounded once to its type) against
// the CPU reference, fp32 and bf16, multi-head and grouped-query, with the heads in one chunk
// and split over several (a small scratch budget). This checks every stride, transpose and
// offset the CUDA backend (cuBLAS strided-batched GEMMs) is given, without a GPU.
#include "kernels/attention_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/kernel_test_util.h"

namespace strata {
namespace {

float LoadAs(const void* base, int64_t i, DType type) {
  return type == DType::kF32 ? static_cast<const float*>(base)[i]
                             : ToFloat(static_cast<const bf16*>(base)[i]);
}
void StoreAs(void* base, int64_t i, DType type, float value) {
  if (type == DType::kF32) {
    static_cast<float*>(base)[i] = value;
  } else {
    static_cast<bf16*>(base)[i] = ToBf16(value);
  }
}

class LoopBackend : public AttentionGemmBackend {
 public:
  explicit LoopBackend(size_t budget) : budget_(budget) {}

  Status Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda,
              int64_t sa, const void* b, int ldb, int64_t sb, float beta, void* c, int ldc,
              int64_t sc, int batch, DType ab, DType c_type) override {
    ++gemms_;
    for (int x = 0; x < batch; ++x) {
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          float sum = 0.0f;
          for (int p = 0; p < k; ++p) {
            const float av =
                LoadAs(a, x * sa + (ta ? i * int64_t{lda} + p : p * int64_t{lda} + i), ab);
            const float bv =
                LoadAs(b, x * sb + (tb ? p * int64_t{ldb} + j : j * int64_t{ldb} + p), ab);
            sum += av * bv;
          }
          const int64_t at = x * sc + j * int64_t{ldc} + i;
          const float old = beta == 0.0f ? 0.0f : LoadAs(c, at, c_type);
          StoreAs(c, at, c_type, alpha * sum + beta * old);
        }
      }
    }
    return absl::OkStatus();
  }

  Status SoftmaxRows(DType dtype, void* p, float* stats, int64_t stats_stride, const float* scores,
                     int heads, int T) override {
    for (int x = 0; x < heads; ++x) {
      for (int i = 0; i < T; ++i) {
        const float* row = scores + (int64_t{x} * T + i) * T;
        float max = -INFINITY;
        for (int j = 0; j <= i; ++j) max = std::fmax(max, row[j]);
        float sum = 0.0f;
        for (int j = 0; j <= i; ++j) sum += std::exp(row[j] - max);
        const float lse = max + std::log(sum);
        stats[x * stats_stride + i] = lse;
        for (int j = 0; j < T; ++j) {
          StoreAs(p, (int64_t{x} * T + i) * T + j, dtype, j <= i ? std::exp(row[j] - lse) : 0.0f);
        }
      }
    }
    return absl::OkStatus();
  }

  Status SoftmaxBackwardRows(DType dtype, void* p, void* ds, const float* scores, const float* dp,
                             const float* stats, int64_t stats_stride, const void* dout,
                             const void* out, int64_t row_stride, int64_t head_stride, int hs,
                             int heads, int T) override {
    for (int x = 0; x < heads; ++x) {
      for (int i = 0; i < T; ++i) {
        float d = 0.0f;
        for (int e = 0; e < hs; ++e) {
          const int64_t at = x * head_stride + i * row_stride + e;
          d += LoadAs(dout, at, dtype) * LoadAs(out, at, dtype);
        }
        for (int j = 0; j < T; ++j) {
          const int64_t at = (int64_t{x} * T + i) * T + j;
          const float prob = j <= i ? std::exp(scores[at] - stats[x * stats_stride + i]) : 0.0f;
          StoreAs(p, at, dtype, prob);
          StoreAs(ds, at, dtype, j <= i ? prob * (dp[at] - d) : 0.0f);
        }
      }
    }
    return absl::OkStatus();
  }

  Status AddFloatRows(DType dtype, void* dst, int64_t row_stride, int64_t head_stride,
                      const float* src, int heads, int T, int hs) override {
    for (int x = 0; x < heads; ++x) {
      for (int i = 0; i < T; ++i) {
        for (int e = 0; e < hs; ++e) {
          const int64_t at = x * head_stride + i * row_stride + e;
          StoreAs(dst, at, dtype, LoadAs(dst, at, dtype) + src[(int64_t{x} * T + i) * hs + e]);
        }
      }
    }
    return absl::OkStatus();
  }

  StatusOr<void*> Scratch(size_t bytes) override {
    largest_scratch_ = std::max(largest_scratch_, bytes);
    // Poisoned: every element the order reads must have been written first.
    scratch_.assign(bytes / sizeof(float) + 1, std::nanf(""));
    return static_cast<void*>(scratch_.data());
  }
  void Release() override { scratch_.clear(); }
  size_t scratch_budget() const override { return budget_; }
  int gemms() const { return gemms_; }
  size_t largest_scratch() const { return largest_scratch_; }

 private:
  const size_t budget_;
  std::vector<float> scratch_;
  int gemms_ = 0;
  size_t largest_scratch_ = 0;
};

template <typename T>
class AttentionGemmTest : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionGemmTest, cpu::StorageTypes);

TYPED_TEST(AttentionGemmTest, MatchesTheCpuReference) {
  using T = TypeParam;
  constexpr DType kType = std::is_same_v<T, float> ? DType::kF32 : DType::kBF16;
  // cuda_ops_test's attention tolerances. In bf16 the backward's P and dS are rounded to
  // bf16 before their GEMMs (tensor cores take bf16 operands; FlashAttention does the same),
  // one rounding more than the reference: dS sums to 0 over a row, so dq and dk lose more
  // (kAttentionGemmGrad there too).
  const float atol = kType == DType::kF32 ? 5e-5f : 2e-3f;
  const float rtol = kType == DType::kF32 ? 5e-4f : 1e-2f;
  const float grad_atol = kType == DType::kF32 ? atol : 8e-3f;
  const float grad_rtol = kType == DType::kF32 ? rtol : 2e-2f;
  struct Shape {
    int B, T, C, NH, NKV;
  };
  for (const Shape& shape :
       {Shape{2, 9, 39, 3, 3}, Shape{1, 17, 64, 2, 2}, Shape{2, 11, 78, 6, 2},
        Shape{1, 13, 96, 6, 3}, Shape{2, 7, 48, 4, 1}, Shape{1, 77, 384, 6, 3}}) {
    // A budget of one head's score matrices splits the heads into chunks; a large one does not.
    for (const size_t budget : {size_t{1}, size_t{64} << 20}) {
      const int B = shape.B, TT = shape.T, C = shape.C, NH = shape.NH, NKV = shape.NKV;
      const std::string where = "B=" + std::to_string(B) + " T=" + std::to_string(TT) +
                                " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                                " NKV=" + std::to_string(NKV) + " budget=" + std::to_string(budget);
      const size_t rows = size_t(B) * TT, width = size_t(C) + 2 * size_t(NKV) * (C / NH);
      const std::vector<T> qkv = cpu::ToStorage<T>(cpu::RandomFloats(rows * width, -1, 1, 21));
      const std::vector<T> dout = cpu::ToStorage<T>(cpu::RandomFloats(rows * C, -1, 1, 22));
      const std::vector<T> dqkv0 = cpu::ToStorage<T>(cpu::RandomFloats(rows * width, -1, 1, 23));
      std::vector<T> out(rows * C), dqkv = dqkv0;
      std::vector<float> stats(size_t(B) * NH * TT);
      cpu::AttentionForwardReference(out.data(), stats.data(), qkv.data(), B, TT, C, NH, NKV);
      cpu::AttentionBackwardReference(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                      stats.data(), B, TT, C, NH, NKV);

      LoopBackend backend(budget);
      std::vector<T> got_out(rows * C), got_dqkv = dqkv0;
      std::vector<float> got_stats(stats.size(), std::nanf(""));
      ASSERT_TRUE(AttentionForwardByGemm(backend, kType, got_out.data(), got_stats.data(),
                                         qkv.data(), B, TT, C, NH, NKV)
                      .ok());
      // The backward gets the reference's forward results, so it is checked on its own.
      ASSERT_TRUE(AttentionBackwardByGemm(backend, kType, got_dqkv.data(), dout.data(), qkv.data(),
                                          out.data(), stats.data(), B, TT, C, NH, NKV)
                      .ok());
      cpu::ExpectAllClose(cpu::ToFloats(got_out), cpu::ToFloats(out), atol, rtol, "out " + where);
      cpu::ExpectAllClose(got_stats, stats, 1e-5f, 1e-5f, "stats " + where);
      cpu::ExpectAllClose(cpu::ToFloats(got_dqkv), cpu::ToFloats(dqkv), grad_atol, grad_rtol,
                          "dqkv " + where);
    }
  }
}

TEST(AttentionGemm, ChunksTheHeadsUnderTheBudget) {
  // 4 key/value heads, one member each: with room for one head per chunk, the forward issues
  // 2 GEMMs per chunk (scores, output) for each of the 4 chunks; with room for all, 2.
  const int B = 1, T = 5, C = 32, NH = 4, NKV = 4;
  std::vector<float> qkv(size_t(B) * T * (C + 2 * NKV * (C / NH)), 0.5f), out(size_t(B) * T * C);
  std::vector<float> stats(size_t(B) * NH * T);
  LoopBackend small(1), large(size_t{1} << 20);
  ASSERT_TRUE(AttentionForwardByGemm(small, DType::kF32, out.data(), stats.data(), qkv.data(), B, T,
                                     C, NH, NKV)
                  .ok());
  ASSERT_TRUE(AttentionForwardByGemm(large, DType::kF32, out.data(), stats.data(), qkv.data(), B, T,
                                     C, NH, NKV)
                  .ok());
  EXPECT_EQ(small.gemms(), 8);
  EXPECT_EQ(large.gemms(), 2);
  // What a planner is told equals what the backward asks for.
  std::vector<float> dqkv(qkv.size()), dout(out.size(), 0.25f);
  for (LoopBackend* backend : {&small, &large}) {
    ASSERT_TRUE(AttentionBackwardByGemm(*backend, DType::kF32, dqkv.data(), dout.data(), qkv.data(),
                                        out.data(), stats.data(), B, T, C, NH, NKV)
                    .ok());
    EXPECT_EQ(backend->largest_scratch(),
              AttentionGemmScratchBytes(DType::kF32, T, C, NH, NKV, backend->scratch_budget()));
  }
  EXPECT_LT(small.largest_scratch(), large.largest_scratch());
}

}  // namespace
}  // namespace strata
