// simgpu/cublas.cc: the cuBLAS double: handles bound to streams, status names, and the two
// GEMMs strata calls (cublasGemmEx, cublasGemmStridedBatchedEx), written from NVIDIA's cuBLAS
// documentation: column-major C = alpha op(A) op(B) + beta C, op N or T (C = T for real types),
// alpha and beta read from host memory at the call (CUBLAS_POINTER_MODE_HOST, the default).
//
// Supported: compute CUBLAS_COMPUTE_32F with A and B of one type, CUDA_R_32F -> CUDA_R_32F,
// CUDA_R_16BF -> CUDA_R_16BF and CUDA_R_16BF -> CUDA_R_32F (what kernels/cuda/cuda_ops.cc
// passes); anything else is CUBLAS_STATUS_NOT_SUPPORTED. Sums are fp32 in order of k, then
// alpha and beta applied in fp32 (as cuBLAS, not bit-identical to it: tests compare with a
// tolerance); bf16
// results are rounded to nearest even. beta == 0 means C is not read (NaN in C never leaks).
// Each GEMM is one stream operation (simgpu::Enqueue) that reads A and B and writes C, with
// the matrices' exact column ranges as its accesses.
// Thread-safety: a handle is used by one thread at a time (as cuBLAS requires); the GEMM
// work runs on the stream's thread.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "simgpu/work.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// At most this many access ranges per matrix; past it, one range per batch entry.
constexpr size_t kMaxRanges = 1024;


size_t ElementBytes(cudaDataType type) { return type == CUDA_R_32F ? 4 : 2; }

float Load(const void* base, cudaDataType type, int64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  return strata::ToFloat(static_cast<const strata::bf16*>(base)[index]);
}

// One GEMM's arguments, copied so that the work can run later on the stream's thread.
struct Gemm {
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 0, beta = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  cudaDataType ab_type = CUDA_R_32F, c_type = CUDA_R_32F;
  int lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 1;
};

// op(A) for one batch entry as a row-major m x k float matrix; op(B) as n x k (row j is
// column j of op(B)), so that each output is a dot product of two contiguous rows.
void Gather(const Gemm& g, int batch_index, std::vector<float>& a_rows, std::vector<float>& b_rows) {
  const int64_t a_offset = batch_index * g.stride_a, b_offset = batch_index * g.stride_b;
  a_rows.resize(static_cast<size_t>(g.m) * g.k);
  b_rows.resize(static_cast<size_t>(g.n) * g.k);
  for (int i = 0; i < g.m; ++i) {
    for (int p = 0; p < g.k; ++p) {
      // op(A)[i,p]: A[i,p] (column-major, ld lda) or A[p,i] when transposed.
      const int64_t index = g.transpose_a ? int64_t{p} + int64_t{i} * g.lda
                                          : int64_t{i} + int64_t{p} * g.lda;
      a_rows[static_cast<size_t>(i) * g.k + p] = Load(g.a, g.ab_type, a_offset + index);
    }
  }
  for (int j = 0; j < g.n; ++j) {
    for (int p = 0; p < g.k; ++p) {
      // op(B)[p,j]: B[p,j] or B[j,p] when transposed.
      const int64_t index = g.transpose_b ? int64_t{j} + int64_t{p} * g.ldb
                                          : int64_t{p} + int64_t{j} * g.ldb;
      b_rows[static_cast<size_t>(j) * g.k + p] = Load(g.b, g.ab_type, b_offset + index);
    }
  }
}

void Run(const Gemm& g) {
  std::vector<float> a_rows, b_rows;
  for (int batch_index = 0; batch_index < g.batch; ++batch_index) {
    Gather(g, batch_index, a_rows, b_rows);
    const int64_t c_offset = batch_index * g.stride_c;
#pragma omp parallel for schedule(static) if (int64_t{g.m} * g.n * g.k > (1 << 18))
    for (int j = 0; j < g.n; ++j) {
      const float* column = &b_rows[static_cast<size_t>(j) * g.k];
      for (int i = 0; i < g.m; ++i) {
        const float* row = &a_rows[static_cast<size_t>(i) * g.k];
        float sum = 0.0f;
        for (int p = 0; p < g.k; ++p) sum += row[p] * column[p];
        const int64_t index = c_offset + int64_t{i} + int64_t{j} * g.ldc;
        float result = g.alpha * sum;
        if (g.beta != 0.0f) result += g.beta * Load(g.c, g.c_type, index);
        if (g.c_type == CUDA_R_32F) {
          static_cast<float*>(g.c)[index] = result;
        } else {
          static_cast<strata::bf16*>(g.c)[index] = strata::ToBf16(result);  // nearest even
        }
      }
    }
  }
}

// The bytes a column-major rows x cols matrix (leading dimension ld, `batch` entries
// `stride` elements apart) touches: one range per column where few enough, merged.
std::vector<simgpu::Access> MatrixAccesses(const void* base, size_t element_bytes, int rows,
                                           int cols, int ld, int64_t stride, int batch,
                                           bool write) {
  std::vector<std::pair<int64_t, int64_t>> ranges;  // element offsets [begin, end)
  const bool per_column = static_cast<size_t>(cols) * batch <= kMaxRanges;
  for (int entry = 0; entry < batch; ++entry) {
    const int64_t start = entry * stride;
    if (per_column) {
      for (int col = 0; col < cols; ++col) {
        ranges.emplace_back(start + int64_t{col} * ld, start + int64_t{col} * ld + rows);
      }
    } else {
      ranges.emplace_back(start, start + int64_t{cols - 1} * ld + rows);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& range : ranges) {
    if (!merged.empty() && range.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  std::vector<simgpu::Access> accesses;
  for (const auto& [begin, end] : merged) {
    accesses.push_back({static_cast<const char*>(base) + begin * static_cast<int64_t>(element_bytes),
                        static_cast<size_t>(end - begin) * element_bytes, write});
  }
  return accesses;
}

cublasStatus_t Invalid(const char* call, const std::string& why) {
  std::fprintf(stderr, "simgpu: %s: %s (CUBLAS_STATUS_INVALID_VALUE)\n", call, why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

bool Transposes(cublasOperation_t op, bool* transposed) {
  if (op == CUBLAS_OP_N) {
    *transposed = false;
    return true;
  }
  if (op == CUBLAS_OP_T || op == CUBLAS_OP_C) {  // conjugation is nothing for real types
    *transposed = true;
    return true;
  }
  return false;
}

// The checks of cuBLAS's documentation, then the GEMM as one stream operation.
cublasStatus_t CheckAndEnqueue(const char* call, cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, const void* alpha, const void* beta,
                               cudaDataType a_type, cudaDataType b_type,
                               cublasComputeType_t compute, Gemm g) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!Transposes(transa, &g.transpose_a) || !Transposes(transb, &g.transpose_b)) {
    return Invalid(call, "transa/transb not N, T or C");
  }
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0) {
    return Invalid(call, "m, n, k or batchCount negative");
  }
  const int a_rows = g.transpose_a ? g.k : g.m, b_rows = g.transpose_b ? g.n : g.k;
  if (g.lda < std::max(1, a_rows)) {
    return Invalid(call, "lda " + std::to_string(g.lda) + " < max(1, " + std::to_string(a_rows) + ")");
  }
  if (g.ldb < std::max(1, b_rows)) {
    return Invalid(call, "ldb " + std::to_string(g.ldb) + " < max(1, " + std::to_string(b_rows) + ")");
  }
  if (g.ldc < std::max(1, g.m)) {
    return Invalid(call, "ldc " + std::to_string(g.ldc) + " < max(1, " + std::to_string(g.m) + ")");
  }
  if (alpha == nullptr || beta == nullptr) return Invalid(call, "alpha or beta is null");
  const bool supported = compute == CUBLAS_COMPUTE_32F && a_type == b_type &&
                         ((a_type == CUDA_R_32F && g.c_type == CUDA_R_32F) ||
                          (a_type == CUDA_R_16BF &&
                           (g.c_type == CUDA_R_16BF || g.c_type == CUDA_R_32F)));
  if (!supported) {
    std::fprintf(stderr,
                 "simgpu: %s: types A %d, B %d, C %d with compute type %d are not supported "
                 "(CUBLAS_STATUS_NOT_SUPPORTED)\n",
                 call, a_type, b_type, g.c_type, compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  g.ab_type = a_type;
  g.alpha = *static_cast<const float*>(alpha);
  g.beta = *static_cast<const float*>(beta);
  std::vector<simgpu::Access> accesses;
  if (g.k > 0) {
    const int a_cols = g.transpose_a ? g.m : g.k, b_cols = g.transpose_b ? g.k : g.n;
    accesses = MatrixAccesses(g.a, ElementBytes(a_type), a_rows, a_cols, g.lda, g.stride_a,
                              g.batch, false);
    std::vector<simgpu::Access> b = MatrixAccesses(g.b, ElementBytes(b_type), b_rows, b_cols,
                                                   g.ldb, g.stride_b, g.batch, false);
    accesses.insert(accesses.end(), b.begin(), b.end());
  }
  std::vector<simgpu::Access> c =
      MatrixAccesses(g.c, ElementBytes(g.c_type), g.m, g.n, g.ldc, g.stride_c, g.batch, true);
  accesses.insert(accesses.end(), c.begin(), c.end());
  const cudaError_t queued = simgpu::Enqueue(handle->stream, call, std::move(accesses), [g] {
    Run(g);
    return std::string();
  });
  if (queued != cudaSuccess) {
    std::fprintf(stderr, "simgpu: %s: the stream refused the GEMM: %s (CUBLAS_STATUS_EXECUTION_FAILED)\n",
                 call, cudaGetErrorName(queued));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  Gemm g;
  g.m = m, g.n = n, g.k = k;
  g.a = A, g.b = B, g.c = C;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.c_type = Ctype;
  return CheckAndEnqueue("cublasGemmEx", handle, transa, transb, alpha, beta, Atype, Btype,
                         computeType, g);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  Gemm g;
  g.m = m, g.n = n, g.k = k;
  g.a = A, g.b = B, g.c = C;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.stride_a = strideA, g.stride_b = strideB, g.stride_c = strideC;
  g.batch = batchCount;
  g.c_type = Ctype;
  return CheckAndEnqueue("cublasGemmStridedBatchedEx", handle, transa, transb, alpha, beta, Atype,
                         Btype, computeType, g);
}

}  // extern "C"
