// Fixed-order column sums on CUDA (column_sums.cuh): the two passes and their launch.
// Thread-safety: reentrant.
#include "kernels/cuda/column_sums.cuh"

#include <algorithm>

#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;  // the final pass's blocks

constexpr int kColumnThreadRows = 16;
constexpr int kMinRowsPerGroup = 128;
constexpr int kMaxRowGroups = 64;

struct ColumnGroups {
  int groups, rows_per_group;
};

ColumnGroups MakeColumnGroups(int N) {
  const int groups =
      std::max(1, std::min(kMaxRowGroups, (N + kMinRowsPerGroup - 1) / kMinRowsPerGroup));
  return {groups, (N + groups - 1) / groups};
}

// kSum: sum_partials[g][column] = sum of dout; kNormSum: norm_partials[g][column] = sum of
// norm * dout, with norm = (inp - mean[n]) * rstd[n], or inp * rstd[n] where mean is null.
template <typename S, bool kSum, bool kNormSum>
__global__ void ColumnPartialsKernel(float* sum_partials, float* norm_partials, const S* dout,
                                     const S* inp, const float* mean, const float* rstd, int N,
                                     int C, int rows_per_group) {
  __shared__ float dout_sums[kColumnThreadRows][kWarpSize + 1];
  __shared__ float norm_dout_sums[kColumnThreadRows][kWarpSize + 1];
  const int column = blockIdx.x * kWarpSize + threadIdx.x;
  const int row_begin = blockIdx.y * rows_per_group;
  const int row_end = min(N, row_begin + rows_per_group);
  float dout_sum = 0.0f, norm_dout_sum = 0.0f;
  if (column < C) {
    for (int n = row_begin + threadIdx.y; n < row_end; n += kColumnThreadRows) {
      const size_t index = static_cast<size_t>(n) * C + column;
      const float d = DeviceLoad(dout + index);
      if (kSum) dout_sum += d;
      if (kNormSum) {
        const float centered =
            mean != nullptr ? DeviceLoad(inp + index) - mean[n] : DeviceLoad(inp + index);
        norm_dout_sum += centered * rstd[n] * d;
      }
    }
  }
  dout_sums[threadIdx.y][threadIdx.x] = dout_sum;
  norm_dout_sums[threadIdx.y][threadIdx.x] = norm_dout_sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < C) {
    float dout_total = 0.0f, norm_dout_total = 0.0f;
    for (int y = 0; y < kColumnThreadRows; ++y) {
      dout_total += dout_sums[y][threadIdx.x];
      norm_dout_total += norm_dout_sums[y][threadIdx.x];
    }
    const size_t index = static_cast<size_t>(blockIdx.y) * C + column;
    if (kSum) sum_partials[index] = dout_total;
    if (kNormSum) norm_partials[index] = norm_dout_total;
  }
}

// out[column] += sum_g partials[g][column], g in order.
template <typename S>
__global__ void ColumnFinalKernel(S* out, const float* partials, int groups, int C) {
  STRATA_GRID_STRIDE_LOOP(column, static_cast<size_t>(C)) {
    float total = 0.0f;
    for (int g = 0; g < groups; ++g) total += partials[static_cast<size_t>(g) * C + column];
    DeviceStore(out + column, DeviceLoad(out + column) + total);
  }
}

}  // namespace

template <typename S>
Status ColumnSums(S* dsum, S* dnorm_sum, const S* dout, const S* inp, const float* mean,
                  const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return absl::OkStatus();
  const ColumnGroups layout = MakeColumnGroups(N);
  const size_t sum_floats = static_cast<size_t>(layout.groups) * C;
  const int num_sums = (dsum != nullptr ? 1 : 0) + (dnorm_sum != nullptr ? 1 : 0);
  const size_t partial_bytes = sizeof(float) * num_sums * sum_floats;
  float* partials = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&partials), partial_bytes, stream),
                       absl::StrCat("allocating ", partial_bytes, " bytes of column partial sums"));
  float* sum_partials = dsum != nullptr ? partials : nullptr;
  float* norm_partials = dnorm_sum != nullptr ? partials + (num_sums - 1) * sum_floats : nullptr;
  const dim3 grid((C + kWarpSize - 1) / kWarpSize, layout.groups);
  const dim3 block(kWarpSize, kColumnThreadRows);
  if (dsum != nullptr && dnorm_sum != nullptr) {
    ::strata::cuda::Launch<&ColumnPartialsKernel<S, true, true>>(
        grid, block, 0, stream, sum_partials, norm_partials, dout, inp, mean, rstd, N, C,
        layout.rows_per_group);
  } else if (dsum != nullptr) {
    ::strata::cuda::Launch<&ColumnPartialsKernel<S, true, false>>(
        grid, block, 0, stream, sum_partials, nullptr, dout, nullptr, nullptr, nullptr, N, C,
        layout.rows_per_group);
  } else {
    ::strata::cuda::Launch<&ColumnPartialsKernel<S, false, true>>(
        grid, block, 0, stream, nullptr, norm_partials, dout, inp, mean, rstd, N, C,
        layout.rows_per_group);
  }
  const unsigned final_blocks = GridStrideBlocks(C, kThreads);
  if (dsum != nullptr) {
    ::strata::cuda::Launch<&ColumnFinalKernel<S>>(final_blocks, kThreads, 0, stream, dsum,
                                                  sum_partials, layout.groups, C);
  }
  if (dnorm_sum != nullptr) {
    ::strata::cuda::Launch<&ColumnFinalKernel<S>>(final_blocks, kThreads, 0, stream, dnorm_sum,
                                                  norm_partials, layout.groups, C);
  }
  const Status launched = LaunchStatus("column sum kernels", static_cast<size_t>(N) * C);
  CUDA_RETURN_IF_ERROR(cudaFreeAsync(partials, stream), "freeing column partial sums");
  return launched;
}

template Status ColumnSums<float>(float*, float*, const float*, const float*, const float*,
                                  const float*, int, int, cudaStream_t);
template Status ColumnSums<bf16>(bf16*, bf16*, const bf16*, const bf16*, const float*, const float*,
                                 int, int, cudaStream_t);

}  // namespace strata::cuda_kernels
