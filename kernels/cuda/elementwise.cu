// Elementwise CUDA kernels (cuda_kernels.h; specification: kernels/cpu/elementwise.h): GELU
// forward/backward, residual add and gradient accumulation, the LoRA column-slice update and
// its backward, LoRA dropout (the mask of kernels/dropout_mask.h), fp32 <-> compute-dtype casts,
// each a grid-stride loop with one thread per element and one rounding per stored element;
// and SumSquares, the fp64 sum behind global-norm clipping, over a fixed grid of
// kSumSquaresBlocks x kThreads threads whatever the GPU, so its rounding depends on n only.
// Thread-safety: launchers are reentrant.
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/dropout_mask.h"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

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

// LoRA: one thread per element of the N x n slice (i = row * n + j). The product and the
// sum are rounded separately (no FMA contraction), as in the CPU reference.
template <typename S>
__global__ void AddScaledColumnsKernel(S* dst, int dst_cols, int col, const S* src, int n,
                                       float alpha, size_t total) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const size_t row = i / n, j = i % n;
    S* target = dst + row * dst_cols + col + j;
    DeviceStore(target, __fadd_rn(DeviceLoad(target), __fmul_rn(alpha, DeviceLoad(src + i))));
  }
}

template <typename S>
__global__ void ScaledColumnsKernel(S* dst, const S* src, int src_cols, int col, int n,
                                    float alpha, size_t total) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const size_t row = i / n, j = i % n;
    DeviceStore(dst + i, __fmul_rn(alpha, DeviceLoad(src + row * src_cols + col + j)));
  }
}

// Dropout: one thread per element of the N x C input (i = row * C + c); every thread hashes
// its own (global row, position, channel), so no thread depends on another's work. The
// quotient and the sum are rounded separately (no contraction), as in the CPU reference.
template <typename S>
__global__ void DropoutKernel(S* out, const S* in, int C, int T, int64_t row0, float p,
                              float keep_denominator, uint64_t key, bool accumulate, size_t total) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const int64_t row = static_cast<int64_t>(i / C);
    const int64_t c = static_cast<int64_t>(i % C);
    const bool keep = DropoutKeep(key, row0 + row / T, row % T, c, p);
    const float value = keep ? __fdiv_rn(DeviceLoad(in + i), keep_denominator) : 0.0f;
    DeviceStore(out + i, accumulate ? __fadd_rn(DeviceLoad(out + i), value) : value);
  }
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

}  // namespace

Status GeluForward(DType dtype, void* out, const void* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&GeluForwardKernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0,
                                                  stream, static_cast<S*>(out),
                                                  static_cast<const S*>(inp), n);
    return 0;
  });
  return LaunchStatus("GeluForwardKernel", n);
}

Status GeluBackward(DType dtype, void* dinp, const void* inp, const void* dout, size_t n,
                    cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&GeluBackwardKernel<S>>(
        GridStrideBlocks(n, kThreads), kThreads, 0, stream, static_cast<S*>(dinp),
        static_cast<const S*>(inp), static_cast<const S*>(dout), n);
    return 0;
  });
  return LaunchStatus("GeluBackwardKernel", n);
}

Status Add(DType dtype, void* out, const void* a, const void* b, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AddKernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0, stream,
                                          static_cast<S*>(out), static_cast<const S*>(a),
                                          static_cast<const S*>(b), n);
    return 0;
  });
  return LaunchStatus("AddKernel", n);
}

Status Accumulate(DType dtype, void* dst, const void* src, size_t n, cudaStream_t stream) {
  return Add(dtype, dst, dst, src, n, stream);  // dst += src is out = a + b with out == a
}

Status AddScaledColumns(DType dtype, void* dst, int dst_cols, int col, const void* src, int N,
                        int n, float alpha, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * static_cast<size_t>(n);
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AddScaledColumnsKernel<S>>(
        GridStrideBlocks(total, kThreads), kThreads, 0, stream, static_cast<S*>(dst), dst_cols, col,
        static_cast<const S*>(src), n, alpha, total);
    return 0;
  });
  return LaunchStatus("AddScaledColumnsKernel", total);
}

Status ScaledColumns(DType dtype, void* dst, const void* src, int src_cols, int col, int N, int n,
                     float alpha, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * static_cast<size_t>(n);
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&ScaledColumnsKernel<S>>(
        GridStrideBlocks(total, kThreads), kThreads, 0, stream, static_cast<S*>(dst),
        static_cast<const S*>(src), src_cols, col, n, alpha, total);
    return 0;
  });
  return LaunchStatus("ScaledColumnsKernel", total);
}

Status Dropout(DType dtype, void* out, const void* in, int N, int C, int T, int64_t row0, float p,
               uint64_t key, bool accumulate, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * static_cast<size_t>(C);
  if (total == 0) return absl::OkStatus();
  const float keep_denominator = 1.0f - p;  // on the host, as the reference computes it
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&DropoutKernel<S>>(
        GridStrideBlocks(total, kThreads), kThreads, 0, stream, static_cast<S*>(out),
        static_cast<const S*>(in), C, T, row0, p, keep_denominator, key, accumulate, total);
    return 0;
  });
  return LaunchStatus("DropoutKernel", total);
}

Status AccumulateToFloat(DType dtype, float* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AccumulateToFloatKernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0,
                                                        stream, dst, static_cast<const S*>(src), n);
    return 0;
  });
  return LaunchStatus("AccumulateToFloatKernel", n);
}

Status CastFromFloat(DType dtype, void* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&CastFromFloatKernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0,
                                                    stream, static_cast<S*>(dst), src, n);
    return 0;
  });
  return LaunchStatus("CastFromFloatKernel", n);
}

Status CastToFloat(DType dtype, float* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&CastToFloatKernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0,
                                                  stream, dst, static_cast<const S*>(src), n);
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
  ::strata::cuda::Launch<&SumSquaresPartialKernel>(kSumSquaresBlocks, kThreads, 0, stream, partials,
                                                   x, n);
  ::strata::cuda::Launch<&SumSquaresFinalKernel>(1, kSumSquaresBlocks, 0, stream, result, partials);
  const Status launched = LaunchStatus("SumSquares kernels", n);
  CUDA_RETURN_IF_ERROR(cudaFreeAsync(partials, stream), "freeing SumSquares' partial sums");
  return launched;
}

}  // namespace strata::cuda_kernels
