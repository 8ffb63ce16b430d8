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

// partials: [G][C] sums of dout, then (kLayerNorm) [G][C] sums of norm * dout, with
// norm = (inp - mean[n]) * rstd[n].
template <typename S, bool kLayerNorm>
__global__ void ColumnPartialsKernel(float* partials, const S* dout, const S* inp,
                                     const float* mean, const float* rstd, int N, int C,
                                     int rows_per_group) {
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
      dout_sum += d;
      if (kLayerNorm) norm_dout_sum += (DeviceLoad(inp + index) - mean[n]) * rstd[n] * d;
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
    const size_t groups_times_c = static_cast<size_t>(gridDim.y) * C;
    partials[static_cast<size_t>(blockIdx.y) * C + column] = dout_total;
    if (kLayerNorm) {
      partials[groups_times_c + static_cast<size_t>(blockIdx.y) * C + column] = norm_dout_total;
    }
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
  const int num_sums = dnorm_sum != nullptr ? 2 : 1;
  const size_t partial_bytes = sizeof(float) * num_sums * layout.groups * static_cast<size_t>(C);
  float* partials = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&partials), partial_bytes, stream),
                       absl::StrCat("allocating ", partial_bytes, " bytes of column partial sums"));
  const dim3 grid((C + kWarpSize - 1) / kWarpSize, layout.groups);
  const dim3 block(kWarpSize, kColumnThreadRows);
  if (dnorm_sum != nullptr) {
    ColumnPartialsKernel<S, true>
        <<<grid, block, 0, stream>>>(partials, dout, inp, mean, rstd, N, C, layout.rows_per_group);
  } else {
    ColumnPartialsKernel<S, false><<<grid, block, 0, stream>>>(
        partials, dout, nullptr, nullptr, nullptr, N, C, layout.rows_per_group);
  }
  const unsigned final_blocks = GridStrideBlocks(C, kThreads);
  ColumnFinalKernel<S><<<final_blocks, kThreads, 0, stream>>>(dsum, partials, layout.groups, C);
  if (dnorm_sum != nullptr) {
    ColumnFinalKernel<S><<<final_blocks, kThreads, 0, stream>>>(
        dnorm_sum, partials + static_cast<size_t>(layout.groups) * C, layout.groups, C);
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
