// Token + position embedding on CUDA (cuda_kernels.h; specification: kernels/cpu/encoder.h).
// wpe / dwpe may be null (no position embedding, as LLaMA): the forward then copies the
// token rows and the backward skips dwpe.
// Forward: a grid-stride loop, one output element per iteration. Backward: dwpe by a
// grid-stride loop over (t, c) that sums the batch in b order; dwte by one warp per
// (position, 256 channels) in which only a token's first position works, summing all of that
// token's rows in position order. No atomics and no two threads store the same element, so
// both gradients are bit-identical to cpu::EncoderBackwardReference.
// Thread-safety: launchers are reentrant.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// wpe null: out = wte row (a bf16 value goes through fp32 and back unchanged).
template <typename S>
__global__ void EncoderForwardKernel(S* out, const int32_t* tokens, const S* wte, const S* wpe,
                                     int T, int C, size_t total) {
  STRATA_GRID_STRIDE_LOOP(index, total) {
    const size_t row = index / C;
    const int channel = static_cast<int>(index % C);
    float value = DeviceLoad(wte + static_cast<size_t>(tokens[row]) * C + channel);
    if (wpe != nullptr) {
      const int t = static_cast<int>(row % T);
      value += DeviceLoad(wpe + static_cast<size_t>(t) * C + channel);
    }
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

}  // namespace

Status EncoderForward(DType dtype, void* out, const int32_t* tokens, const void* wte,
                      const void* wpe, int B, int T, int C, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&EncoderForwardKernel<S>>(
        GridStrideBlocks(total, kThreads), kThreads, 0, stream, static_cast<S*>(out), tokens,
        static_cast<const S*>(wte), static_cast<const S*>(wpe), T, C, total);
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
    if (dwpe != nullptr) {
      const size_t position_total = static_cast<size_t>(T) * C;
      ::strata::cuda::Launch<&EncoderBackwardPositionsKernel<S>>(
          GridStrideBlocks(position_total, kThreads), kThreads, 0, stream, static_cast<S*>(dwpe),
          static_cast<const S*>(dout), B, T, C);
    }
    const dim3 grid((rows + kWarpsPerBlock - 1) / kWarpsPerBlock,
                    (C + kEncoderChannelsPerWarp - 1) / kEncoderChannelsPerWarp);
    ::strata::cuda::Launch<&EncoderBackwardTokensKernel<S>>(
        grid, kThreads, 0, stream, static_cast<S*>(dwte), static_cast<const S*>(dout), tokens, rows,
        C);
    return 0;
  });
  return LaunchStatus("EncoderBackward kernels", static_cast<size_t>(rows) * C);
}

}  // namespace strata::cuda_kernels
