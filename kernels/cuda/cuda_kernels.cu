// The CUDA kernels of CudaOps except attention (attention.cu) and the GEMMs (cuBLAS, in
// cuda_ops.cc). Each follows its CPU reference in kernels/cpu loop by loop, in fp32 (fp64
// for SumSquares), with one rounding per stored element; see cuda_kernels.h.
// Elementwise kernels are grid-stride loops. Reductions are laid out so that their order
// does not depend on the GPU: a warp or block per row, or, for sums over rows (parameter
// gradients), fixed row chunks per column whose partial sums are then added in order.
// Thread-safety: launchers are reentrant.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"
#include "core/cuda/cuda_status.h"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kLayerNormEps = 1e-5f;  // as cpu::kLayerNormEps

// The launch error of the kernel(s) just enqueued, naming them.
Status LaunchStatus(const char* what, size_t size) {
  CUDA_RETURN_IF_ERROR(cudaGetLastError(), absl::StrCat("launching ", what, " (size ", size, ")"));
  return absl::OkStatus();
}

#define STRATA_GRID_STRIDE_LOOP(i, n)                                                  \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// ---------------------------------------------------------------------------------------
// Encoder

template <typename S>
__global__ void EncoderForwardKernel(S* out, const int32_t* tokens, const S* wte, const S* wpe,
                                     int T, int C, size_t total) {
  STRATA_GRID_STRIDE_LOOP(index, total) {
    const size_t row = index / C;
    const int channel = static_cast<int>(index % C);
    const int t = static_cast<int>(row % T);
    const float value = DeviceLoad(wte + static_cast<size_t>(tokens[row]) * C + channel) +
                        DeviceLoad(wpe + static_cast<size_t>(t) * C + channel);
    DeviceStore(out + index, value);
  }
}

// dwpe[t, c] += sum_b dout[b, t, c], summed in b order from the stored value.
template <typename S>
__global__ void EncoderBackwardPositionsKernel(S* dwpe, const S* dout, int B, int T, int C) {
  const size_t total = static_cast<size_t>(T) * C;
  STRATA_GRID_STRIDE_LOOP(index, total) {
    float sum = DeviceLoad(dwpe + index);
    for (int b = 0; b < B; ++b) sum += DeviceLoad(dout + static_cast<size_t>(b) * total + index);
    DeviceStore(dwpe + index, sum);
  }
}

// Channels per warp of the token-row backward: 8 per lane.
constexpr int kEncoderChannelsPerLane = 8;
constexpr int kEncoderChannelsPerWarp = kEncoderChannelsPerLane * kWarpSize;

// One warp per (position p, chunk of 256 channels). Only the first position of each token
// does work: it sums the dout rows of all positions with that token, in position order,
// starting from the stored dwte row, and stores the row once. No atomics, and the same
// order as cpu::EncoderBackwardReference, hence bit-identical results.
template <typename S>
__global__ void EncoderBackwardTokensKernel(S* dwte, const S* dout, const int32_t* tokens, int rows,
                                            int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int p = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (p >= rows) return;  // whole warp
  const int32_t token = tokens[p];
  for (int q0 = 0; q0 < p; q0 += kWarpSize) {
    const int q = q0 + lane;
    if (__any_sync(kFullMask, q < p && tokens[q] == token)) return;  // not the first
  }
  const int channel0 = blockIdx.y * kEncoderChannelsPerWarp + lane;
  S* dwte_row = dwte + static_cast<size_t>(token) * C;
  float sums[kEncoderChannelsPerLane];
#pragma unroll
  for (int k = 0; k < kEncoderChannelsPerLane; ++k) {
    const int channel = channel0 + k * kWarpSize;
    sums[k] = channel < C ? DeviceLoad(dwte_row + channel) : 0.0f;
  }
  for (int q0 = p; q0 < rows; q0 += kWarpSize) {
    const int q = q0 + lane;
    unsigned matches = __ballot_sync(kFullMask, q < rows && tokens[q] == token);
    while (matches != 0) {  // in position order
      const int match = q0 + __ffs(matches) - 1;
      matches &= matches - 1;
      const S* dout_row = dout + static_cast<size_t>(match) * C;
#pragma unroll
      for (int k = 0; k < kEncoderChannelsPerLane; ++k) {
        const int channel = channel0 + k * kWarpSize;
        if (channel < C) sums[k] += DeviceLoad(dout_row + channel);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kEncoderChannelsPerLane; ++k) {
    const int channel = channel0 + k * kWarpSize;
    if (channel < C) DeviceStore(dwte_row + channel, sums[k]);
  }
}

// ---------------------------------------------------------------------------------------
// LayerNorm: a warp per row for the row-wise parts, a block per 32 columns for the
// parameter gradients.

template <typename S>
__global__ void LayerNormForwardKernel(S* out, float* mean_out, float* rstd_out, const S* inp,
                                       const S* weight, const S* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warp
  const S* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) sum += DeviceLoad(x + i);
  const float mean = WarpSum(sum) / C;
  float squares = 0.0f;  // biased variance, as the reference
  for (int i = lane; i < C; i += kWarpSize) {
    const float shifted = DeviceLoad(x + i) - mean;
    squares += shifted * shifted;
  }
  const float rstd = 1.0f / sqrtf(WarpSum(squares) / C + kLayerNormEps);
  S* out_row = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += kWarpSize) {
    const float normalized = (DeviceLoad(x + i) - mean) * rstd;
    DeviceStore(out_row + i, normalized * DeviceLoad(weight + i) + DeviceLoad(bias + i));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename S>
__global__ void LayerNormBackwardInputKernel(S* dinp, const S* dout, const S* inp, const S* weight,
                                             const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warp
  const size_t offset = static_cast<size_t>(row) * C;
  const S* x = inp + offset;
  const S* d = dout + offset;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) {
    const float norm = (DeviceLoad(x + i) - m) * s;
    const float dnorm = DeviceLoad(weight + i) * DeviceLoad(d + i);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = WarpSum(dnorm_sum) / C;
  const float dnorm_norm_mean = WarpSum(dnorm_norm_sum) / C;
  S* dinp_row = dinp + offset;
  for (int i = lane; i < C; i += kWarpSize) {
    const float norm = (DeviceLoad(x + i) - m) * s;
    const float dnorm = DeviceLoad(weight + i) * DeviceLoad(d + i);
    const float dval = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    DeviceStore(dinp_row + i, DeviceLoad(dinp_row + i) + dval);
  }
}

// Column reductions (parameter gradients: sums over N rows per column), in two passes so
// that they use the whole GPU yet run in a fixed order:
//  1. grid (ceil(C / 32), G): block (x, g) sums rows [g * R, (g + 1) * R) of 32 columns;
//     thread (column, y) takes rows y, y + 16, ..., then the 16 sums are added in order y.
//     The block writes one fp32 partial per column: partials[g][column].
//  2. one thread per column adds partials[0..G) in order to the stored gradient (one
//     rounding per element).
// G and R depend on N only (ColumnGroups), so the result does not depend on the GPU. The
// partials live in stream-ordered scratch (cudaMallocAsync/cudaFreeAsync on the stream).
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

// dsum[c] += sum_n dout[n, c] and, if dnorm_sum is not null (layernorm),
// dnorm_sum[c] += sum_n norm[n, c] * dout[n, c]: the two passes above.
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

// ---------------------------------------------------------------------------------------
// Linear layer helpers

template <typename S>
__global__ void BroadcastBiasKernel(S* out, const S* bias, int OC, size_t total) {
  STRATA_GRID_STRIDE_LOOP(index, total) {
    DeviceStore(out + index, bias != nullptr ? DeviceLoad(bias + index % OC) : 0.0f);
  }
}

// ---------------------------------------------------------------------------------------
// Elementwise

template <typename S>
__global__ void GeluForwardKernel(S* out, const S* inp, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const float x = DeviceLoad(inp + i);
    const float cube = kGeluCubic * x * x * x;
    DeviceStore(out + i, 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube))));
  }
}

template <typename S>
__global__ void GeluBackwardKernel(S* dinp, const S* inp, const S* dout, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const float x = DeviceLoad(inp + i);
    const float cube = kGeluCubic * x * x * x;
    const float tanh_arg = kGeluScale * (x + cube);
    const float tanh_out = tanhf(tanh_arg);
    const float cosh_out = coshf(tanh_arg);  // inf for |arg| > 89: sech^2 is then 0
    const float sech_squared = 1.0f / (cosh_out * cosh_out);
    const float local_grad = 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_squared * kGeluScale *
                                                            (1.0f + 3.0f * kGeluCubic * x * x);
    DeviceStore(dinp + i, DeviceLoad(dinp + i) + local_grad * DeviceLoad(dout + i));
  }
}

// out = a + b; out may alias a or b (each element is read before it is written, by the
// same thread).
template <typename S>
__global__ void AddKernel(S* out, const S* a, const S* b, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) DeviceStore(out + i, DeviceLoad(a + i) + DeviceLoad(b + i));
}

template <typename S>
__global__ void AccumulateToFloatKernel(float* dst, const S* src, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) dst[i] += DeviceLoad(src + i);
}

template <typename S>
__global__ void CastFromFloatKernel(S* dst, const float* src, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) DeviceStore(dst + i, src[i]);
}

template <typename S>
__global__ void CastToFloatKernel(float* dst, const S* src, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) dst[i] = DeviceLoad(src + i);
}

// SumSquares: kSumSquaresBlocks x kThreads threads, whatever the GPU, so the partition and
// hence the rounding depend on n only.
constexpr int kSumSquaresBlocks = 256;

__global__ void SumSquaresPartialKernel(double* partials, const float* x, size_t n) {
  __shared__ double scratch[kWarpSize];
  double sum = 0.0;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const double value = x[i];
    sum += value * value;
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void SumSquaresFinalKernel(float* result, const double* partials) {
  __shared__ double scratch[kWarpSize];
  const double sum = BlockSum(partials[threadIdx.x], scratch);  // blockDim.x == partial count
  if (threadIdx.x == 0) *result = static_cast<float>(sum);
}

// ---------------------------------------------------------------------------------------
// Softmax + cross-entropy: a block per row; three passes (max, sum of exp, gradient).

template <typename S>
__global__ void SoftmaxCrossEntropyKernel(float* losses, S* logits, const int32_t* targets, int V,
                                          float dloss) {
  __shared__ float scratch[kWarpSize];
  S* row = logits + static_cast<size_t>(blockIdx.x) * V;
  const int target = targets[blockIdx.x];
  float max_logit = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    max_logit = fmaxf(max_logit, DeviceLoad(row + i));
  max_logit = BlockMax(max_logit, scratch);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(DeviceLoad(row + i) - max_logit);
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + max_logit - DeviceLoad(row + target);
  if (dloss == 0.0f) return;  // uniform over the block
  __syncthreads();            // the target's logit is read above before any thread overwrites it
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float probability = expf(DeviceLoad(row + i) - max_logit) / sum;
    const float indicator = i == target ? 1.0f : 0.0f;
    DeviceStore(row + i, dloss * (probability - indicator));
  }
}

// ---------------------------------------------------------------------------------------
// AdamW: cpu::AdamWReference's operations in its order, each explicitly rounded (the _rn
// intrinsics are never contracted into FMAs), so the results are bit-identical.

struct AdamConstants {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;
};

template <typename S>
__global__ void AdamWKernel(S* param, float* master, const float* grad, float* m, float* v,
                            size_t n, AdamConstants k) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const float g = __fmul_rn(grad[i], k.grad_scale);
    const float m_new = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float v_new =
        __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float m_hat = __fdiv_rn(m_new, k.bias_correction1);
    const float v_hat = __fdiv_rn(v_new, k.bias_correction2);
    const float p = master[i];
    const float update = __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), k.eps)),
                                   __fmul_rn(k.weight_decay, p));
    const float p_new = __fadd_rn(p, -__fmul_rn(k.lr, update));
    m[i] = m_new;
    v[i] = v_new;
    master[i] = p_new;
    if (param != nullptr) DeviceStore(param + i, p_new);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Launchers

Status EncoderForward(DType dtype, void* out, const int32_t* tokens, const void* wte,
                      const void* wpe, int B, int T, int C, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    EncoderForwardKernel<S><<<GridStrideBlocks(total, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(out), tokens, static_cast<const S*>(wte), static_cast<const S*>(wpe), T, C,
        total);
    return 0;
  });
  return LaunchStatus("EncoderForwardKernel", total);
}

Status EncoderBackward(DType dtype, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                       int B, int T, int C, cudaStream_t stream) {
  const int rows = B * T;
  if (rows == 0 || C == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const size_t position_total = static_cast<size_t>(T) * C;
    EncoderBackwardPositionsKernel<S>
        <<<GridStrideBlocks(position_total, kThreads), kThreads, 0, stream>>>(
            static_cast<S*>(dwpe), static_cast<const S*>(dout), B, T, C);
    const dim3 grid((rows + kWarpsPerBlock - 1) / kWarpsPerBlock,
                    (C + kEncoderChannelsPerWarp - 1) / kEncoderChannelsPerWarp);
    EncoderBackwardTokensKernel<S><<<grid, kThreads, 0, stream>>>(
        static_cast<S*>(dwte), static_cast<const S*>(dout), tokens, rows, C);
    return 0;
  });
  return LaunchStatus("EncoderBackward kernels", static_cast<size_t>(rows) * C);
}

Status LayerNormForward(DType dtype, void* out, float* mean, float* rstd, const void* inp,
                        const void* weight, const void* bias, int N, int C, cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    LayerNormForwardKernel<S><<<(N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream>>>(
        static_cast<S*>(out), mean, rstd, static_cast<const S*>(inp), static_cast<const S*>(weight),
        static_cast<const S*>(bias), N, C);
    return 0;
  });
  return LaunchStatus("LayerNormForwardKernel", static_cast<size_t>(N) * C);
}

Status LayerNormBackward(DType dtype, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return absl::OkStatus();
  return DispatchStorage(dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    LayerNormBackwardInputKernel<S>
        <<<(N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream>>>(
            static_cast<S*>(dinp), static_cast<const S*>(dout), static_cast<const S*>(inp),
            static_cast<const S*>(weight), mean, rstd, N, C);
    RETURN_IF_ERROR(LaunchStatus("LayerNormBackwardInputKernel", static_cast<size_t>(N) * C));
    return ColumnSums(static_cast<S*>(dbias), static_cast<S*>(dweight), static_cast<const S*>(dout),
                      static_cast<const S*>(inp), mean, rstd, N, C, stream);
  });
}

Status BroadcastBias(DType dtype, void* out, const void* bias, int N, int OC, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * OC;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    BroadcastBiasKernel<S><<<GridStrideBlocks(total, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(out), static_cast<const S*>(bias), OC, total);
    return 0;
  });
  return LaunchStatus("BroadcastBiasKernel", total);
}

Status BiasBackward(DType dtype, void* dbias, const void* dout, int N, int OC,
                    cudaStream_t stream) {
  return DispatchStorage(dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    return ColumnSums(static_cast<S*>(dbias), static_cast<S*>(nullptr), static_cast<const S*>(dout),
                      static_cast<const S*>(nullptr), nullptr, nullptr, N, OC, stream);
  });
}

Status GeluForward(DType dtype, void* out, const void* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    GeluForwardKernel<S><<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(out), static_cast<const S*>(inp), n);
    return 0;
  });
  return LaunchStatus("GeluForwardKernel", n);
}

Status GeluBackward(DType dtype, void* dinp, const void* inp, const void* dout, size_t n,
                    cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    GeluBackwardKernel<S><<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(dinp), static_cast<const S*>(inp), static_cast<const S*>(dout), n);
    return 0;
  });
  return LaunchStatus("GeluBackwardKernel", n);
}

Status Add(DType dtype, void* out, const void* a, const void* b, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    AddKernel<S><<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b), n);
    return 0;
  });
  return LaunchStatus("AddKernel", n);
}

Status Accumulate(DType dtype, void* dst, const void* src, size_t n, cudaStream_t stream) {
  return Add(dtype, dst, dst, src, n, stream);  // dst += src is out = a + b with out == a
}

Status AccumulateToFloat(DType dtype, float* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    AccumulateToFloatKernel<S><<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
        dst, static_cast<const S*>(src), n);
    return 0;
  });
  return LaunchStatus("AccumulateToFloatKernel", n);
}

Status CastFromFloat(DType dtype, void* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    CastFromFloatKernel<S>
        <<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(static_cast<S*>(dst), src, n);
    return 0;
  });
  return LaunchStatus("CastFromFloatKernel", n);
}

Status CastToFloat(DType dtype, float* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    CastToFloatKernel<S><<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
        dst, static_cast<const S*>(src), n);
    return 0;
  });
  return LaunchStatus("CastToFloatKernel", n);
}

Status SumSquares(float* result, const float* x, size_t n, cudaStream_t stream) {
  // Stream-ordered scratch: freed on the stream after the final kernel, so concurrent calls
  // on other streams never share it.
  double* partials = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&partials),
                                       kSumSquaresBlocks * sizeof(double), stream),
                       "allocating SumSquares' partial sums");
  SumSquaresPartialKernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(partials, x, n);
  SumSquaresFinalKernel<<<1, kSumSquaresBlocks, 0, stream>>>(result, partials);
  const Status launched = LaunchStatus("SumSquares kernels", n);
  CUDA_RETURN_IF_ERROR(cudaFreeAsync(partials, stream), "freeing SumSquares' partial sums");
  return launched;
}

Status SoftmaxCrossEntropy(DType dtype, float* losses, void* logits, const int32_t* targets, int N,
                           int V, float dloss, cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    SoftmaxCrossEntropyKernel<S>
        <<<N, kThreads, 0, stream>>>(losses, static_cast<S*>(logits), targets, V, dloss);
    return 0;
  });
  return LaunchStatus("SoftmaxCrossEntropyKernel", static_cast<size_t>(N) * V);
}

Status AdamW(DType dtype, void* param, float* master, const float* grad, float* m, float* v,
             size_t n, const AdamParams& hp, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  // As cpu::AdamWReference's MakeConstants: bias corrections in double, rounded once.
  AdamConstants k;
  k.lr = hp.lr;
  k.beta1 = hp.beta1;
  k.beta2 = hp.beta2;
  k.one_minus_beta1 = 1.0f - hp.beta1;
  k.one_minus_beta2 = 1.0f - hp.beta2;
  k.eps = hp.eps;
  k.weight_decay = hp.weight_decay;
  k.grad_scale = hp.grad_scale;
  k.bias_correction1 = static_cast<float>(1.0 - std::pow(double{hp.beta1}, hp.step));
  k.bias_correction2 = static_cast<float>(1.0 - std::pow(double{hp.beta2}, hp.step));
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    AdamWKernel<S><<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(param), master, grad, m, v, n, k);
    return 0;
  });
  return LaunchStatus("AdamWKernel", n);
}

}  // namespace strata::cuda_kernels
