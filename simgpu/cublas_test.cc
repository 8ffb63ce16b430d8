// simgpu/cublas_test.cc: the cuBLAS double's GEMMs against a plain triple loop in double,
// for every op N/T pair, odd sizes, leading dimensions larger than the rows, batch strides
// with gaps (which must stay untouched), fp32 and bf16 inputs and outputs, beta 0 over a
// NaN-filled C, and the argument checks. Tolerance: fp32 |got - ref| <= 1e-5 (1 + |ref|);
// bf16 output within one bf16 rounding of the reference (2^-8 relative).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// Truncation is enough for inputs (they are then exact bf16 values).
uint16_t TruncateToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>(bits >> 16);
}

struct Case {
  cublasOperation_t transa, transb;
  cudaDataType ab, c;
  int m, n, k, pad;  // pad: extra rows of each leading dimension
  int batch;
  float alpha, beta;
};

std::string Name(const Case& t) {
  return std::string(t.transa == CUBLAS_OP_N ? "N" : "T") + (t.transb == CUBLAS_OP_N ? "N" : "T") +
         (t.ab == CUDA_R_32F ? " f32" : " bf16") + (t.c == CUDA_R_32F ? "->f32" : "->bf16") +
         " m=" + std::to_string(t.m) + " n=" + std::to_string(t.n) + " k=" + std::to_string(t.k) +
         " batch=" + std::to_string(t.batch) + " beta=" + std::to_string(t.beta);
}

// Host-side values of a typed buffer.
struct Matrix {
  cudaDataType type;
  std::vector<float> values;  // exactly representable in `type`
  std::vector<unsigned char> Bytes() const {
    const size_t element = type == CUDA_R_32F ? 4 : 2;
    std::vector<unsigned char> bytes(values.size() * element);
    for (size_t i = 0; i < values.size(); ++i) {
      if (type == CUDA_R_32F) {
        std::memcpy(&bytes[i * 4], &values[i], 4);
      } else {
        const uint16_t bits = TruncateToBf16(values[i]);
        std::memcpy(&bytes[i * 2], &bits, 2);
      }
    }
    return bytes;
  }
};

Matrix Filled(cudaDataType type, size_t count, uint32_t seed) {
  Matrix matrix{type, std::vector<float>(count)};
  uint32_t state = seed * 2654435761u + 12345u;
  for (float& v : matrix.values) {
    state = state * 1664525u + 1013904223u;
    // k/128 with |k| <= 128: 8 significant bits, exact in bf16 as in fp32.
    v = static_cast<float>(static_cast<int>((state >> 8) % 257) - 128) / 128.0f;
  }
  return matrix;
}

void* ToDevice(const std::vector<unsigned char>& bytes) {
  void* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, bytes.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, nullptr),
            cudaSuccess);
  return device;
}

void RunCase(const Case& t) {
  SCOPED_TRACE(Name(t));
  const bool ta = t.transa != CUBLAS_OP_N, tb = t.transb != CUBLAS_OP_N;
  const int a_rows = ta ? t.k : t.m, a_cols = ta ? t.m : t.k;
  const int b_rows = tb ? t.n : t.k, b_cols = tb ? t.k : t.n;
  const int lda = a_rows + t.pad, ldb = b_rows + t.pad, ldc = t.m + t.pad;
  // Strides leave a gap of 5 elements after each matrix.
  const int64_t sa = int64_t{lda} * a_cols + 5, sb = int64_t{ldb} * b_cols + 5,
                sc = int64_t{ldc} * t.n + 5;
  const Matrix a = Filled(t.ab, sa * t.batch, 1), b = Filled(t.ab, sb * t.batch, 2);
  Matrix c = Filled(t.c, sc * t.batch, 3);
  const float kSentinel = 1024.0f;  // exact in bf16
  for (int e = 0; e < t.batch; ++e) {
    for (int64_t g = sc * e + int64_t{ldc} * t.n; g < sc * (e + 1); ++g) c.values[g] = kSentinel;
    if (t.beta == 0.0f) {
      for (int j = 0; j < t.n; ++j) {
        for (int i = 0; i < t.m; ++i) {
          c.values[sc * e + i + int64_t{j} * ldc] = std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
  }
  void* da = ToDevice(a.Bytes());
  void* db = ToDevice(b.Bytes());
  std::vector<unsigned char> c_bytes = c.Bytes();
  void* dc = ToDevice(c_bytes);

  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cublasSetStream(handle, stream), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads (legacy stream)
  if (t.batch == 1) {
    ASSERT_EQ(cublasGemmEx(handle, t.transa, t.transb, t.m, t.n, t.k, &t.alpha, da, t.ab, lda, db,
                           t.ab, ldb, &t.beta, dc, t.c, ldc, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
  } else {
    ASSERT_EQ(cublasGemmStridedBatchedEx(handle, t.transa, t.transb, t.m, t.n, t.k, &t.alpha, da,
                                         t.ab, lda, sa, db, t.ab, ldb, sb, &t.beta, dc, t.c, ldc,
                                         sc, t.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
  }
  std::vector<unsigned char> got_bytes(c_bytes.size());
  ASSERT_EQ(cudaMemcpyAsync(got_bytes.data(), dc, got_bytes.size(), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  auto got = [&](int64_t index) {
    if (t.c == CUDA_R_32F) {
      float v;
      std::memcpy(&v, &got_bytes[index * 4], 4);
      return v;
    }
    uint16_t bits;
    std::memcpy(&bits, &got_bytes[index * 2], 2);
    return Bf16ToFloat(bits);
  };
  for (int e = 0; e < t.batch; ++e) {
    for (int j = 0; j < t.n; ++j) {
      for (int i = 0; i < t.m; ++i) {
        double sum = 0;
        for (int p = 0; p < t.k; ++p) {
          const double x = a.values[sa * e + (ta ? p + int64_t{i} * lda : i + int64_t{p} * lda)];
          const double y = b.values[sb * e + (tb ? j + int64_t{p} * ldb : p + int64_t{j} * ldb)];
          sum += x * y;
        }
        const int64_t index = sc * e + i + int64_t{j} * ldc;
        double expected = t.alpha * sum;
        if (t.beta != 0.0f) expected += t.beta * static_cast<double>(c.values[index]);
        const double tolerance = t.c == CUDA_R_32F ? 1e-5 * (1 + std::fabs(expected))
                                                   : std::ldexp(std::fabs(expected), -8) + 1e-6;
        ASSERT_NEAR(got(index), expected, tolerance) << "batch " << e << " C[" << i << "," << j << "]";
      }
      // Rows past m in the padded leading dimension are untouched.
      for (int i = t.m; i < ldc; ++i) {
        const int64_t index = sc * e + i + int64_t{j} * ldc;
        ASSERT_EQ(got(index), c.values[index]) << "padding row " << i;
      }
    }
    for (int64_t g = sc * e + int64_t{ldc} * t.n; g < sc * (e + 1); ++g) {
      ASSERT_EQ(got(g), kSentinel) << "gap element " << g;
    }
  }
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST(CublasGemm, MatchesTheTripleLoop) {
  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
  const std::pair<cudaDataType, cudaDataType> types[] = {
      {CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
  for (cublasOperation_t ta : ops) {
    for (cublasOperation_t tb : ops) {
      for (const auto& [ab, c] : types) {
        for (int batch : {1, 3}) {
          for (float beta : {0.0f, 0.5f, 1.0f}) {
            RunCase({ta, tb, ab, c, 5, 7, 3, 0, batch, 1.0f, beta});
            RunCase({ta, tb, ab, c, 13, 9, 17, 3, batch, 0.75f, beta});
          }
        }
      }
    }
  }
}

TEST(CublasGemm, LargerThanTheParallelThreshold) {
  RunCase({CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_32F, 70, 65, 67, 1, 1, 1.0f, 1.0f});
  RunCase({CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_32F, CUDA_R_32F, 64, 80, 70, 2, 2, 1.0f, 0.0f});
}

TEST(CublasGemm, KZeroScalesC) {
  RunCase({CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 3, 4, 0, 1, 1, 1.0f, 0.5f});
  RunCase({CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 3, 4, 0, 1, 2, 1.0f, 0.0f});
}

TEST(CublasGemm, ArgumentChecks) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, 1 << 16), cudaSuccess);
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](cublasOperation_t ta, int m, int n, int k, int lda, int ldb, int ldc,
                  cudaDataType ab, cudaDataType c, cublasComputeType_t compute) {
    return cublasGemmEx(handle, ta, CUBLAS_OP_N, m, n, k, &one, buffer, ab, lda, buffer, ab, ldb,
                        &zero, buffer, c, ldc, compute, CUBLAS_GEMM_DEFAULT);
  };
  EXPECT_EQ(gemm(CUBLAS_OP_N, 4, 4, 4, 3, 4, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  EXPECT_EQ(gemm(CUBLAS_OP_T, 8, 4, 4, 4, 4, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_SUCCESS);  // lda >= k for op T
  EXPECT_EQ(gemm(CUBLAS_OP_T, 8, 4, 5, 4, 5, 8, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_INVALID_VALUE);  // lda < k
  EXPECT_EQ(gemm(CUBLAS_OP_N, 4, 4, 4, 4, 3, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
  EXPECT_EQ(gemm(CUBLAS_OP_N, 4, 4, 4, 4, 4, 3, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  EXPECT_EQ(gemm(CUBLAS_OP_N, -1, 4, 4, 4, 4, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, buffer,
                                       CUDA_R_32F, 2, 16, buffer, CUDA_R_32F, 4, 16, &zero, buffer,
                                       CUDA_R_32F, 4, 16, 2, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, buffer, CUDA_R_32F, 1,
                         buffer, CUDA_R_32F, 1, &zero, buffer, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(buffer);
  EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

// A GEMM is a stream operation with its ranges: reading a C another stream writes, without
// an event between them, is a race.
// Exits 0 once the race made the error sticky.
void RacingGemmAndCopy() {
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  void* buffer = nullptr;
  cudaMalloc(&buffer, 1 << 16);
  cublasHandle_t handle;
  cublasCreate(&handle);
  cublasSetStream(handle, a);
  const float one = 1.0f, zero = 0.0f;
  char* base = static_cast<char*>(buffer);
  cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, base, CUDA_R_32F, 4, base + 64,
               CUDA_R_32F, 4, &zero, base + 8192, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
               CUBLAS_GEMM_DEFAULT);
  static float host[16];
  cudaMemcpyAsync(host, base + 8192 + 60, 4, cudaMemcpyDeviceToHost, b);
  std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
}

TEST(CublasGemm, IsCheckedForRaces) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(RacingGemmAndCopy(), ::testing::ExitedWithCode(0),
              "\\+8252: cublasGemmEx on stream [0-9]+ and cudaMemcpyAsync on stream");
}

}  // namespace
