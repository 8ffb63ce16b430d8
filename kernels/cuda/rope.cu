// Rotary position embedding on CUDA (cuda_kernels.h; specification: kernels/cpu/rope.h), in
// place on the q and k heads of qkv: a grid-stride loop with one thread per rotated pair
// (x_i, x_{i+hs/2}) of one head of one token.
//
// The inverse frequencies are computed on the host by the same function as cpu::RopeTable's
// (RopeInverseFrequencies, core/rope.h) and passed by value: the angle position * inv_freq grows
// with the position (~1e3..1e5 rad), so an ulp of difference in inv_freq (CUDA's powf is not
// glibc's) would move it by far more than the cos/sin error. The angle is then the same
// single fp32 product on both sides; only CUDA's sincosf (<= 2 ulp) differs from glibc's.
// Thread-safety: launchers are reentrant.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

struct InverseFrequencies {
  float values[kMaxRopeHeadSize / 2];
};

// qkv rows [B*T][(NH + 2*NKV) * hs]; the first `heads` = NH + NKV heads (q, then k) turn.
// sign: +1 forward, -1 backward (the inverse rotation).
template <typename S>
__global__ void RopeKernel(S* qkv, InverseFrequencies inv_freq, int T, int heads, int row_stride,
                           int hs, int position0, float sign, size_t total) {
  const int half = hs / 2;
  STRATA_GRID_STRIDE_LOOP(index, total) {
    const int i = static_cast<int>(index % half);
    const size_t head_index = index / half;  // over (row, head)
    const int head = static_cast<int>(head_index % heads);
    const size_t row = head_index / heads;
    const int t = static_cast<int>(row % T);
    const float angle = static_cast<float>(position0 + t) * inv_freq.values[i];
    float sin_angle, cos_angle;
    sincosf(angle, &sin_angle, &cos_angle);
    const float s = sign * sin_angle;
    S* x = qkv + row * row_stride + static_cast<size_t>(head) * hs;
    const float a = DeviceLoad(x + i), b = DeviceLoad(x + i + half);
    DeviceStore(x + i, a * cos_angle - b * s);
    DeviceStore(x + i + half, b * cos_angle + a * s);
  }
}

}  // namespace

Status Rope(DType dtype, void* qkv, int B, int T, int NH, int NKV, int hs, const RopeSpec& rope,
            int position0, int direction, cudaStream_t stream) {
  const int half = hs / 2;
  const size_t total = static_cast<size_t>(B) * T * (NH + NKV) * half;
  if (total == 0) return absl::OkStatus();
  InverseFrequencies inv_freq{};
  const std::vector<float> frequencies = RopeInverseFrequencies(rope, hs);  // as cpu::RopeTable
  std::copy(frequencies.begin(), frequencies.end(), inv_freq.values);
  const float sign = direction >= 0 ? 1.0f : -1.0f;
  const int row_stride = (NH + 2 * NKV) * hs;
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&RopeKernel<S>>(GridStrideBlocks(total, kThreads), kThreads, 0, stream,
                                           static_cast<S*>(qkv), inv_freq, T, NH + NKV, row_stride,
                                           hs, position0, sign, total);
    return 0;
  });
  return LaunchStatus("RopeKernel", total);
}

}  // namespace strata::cuda_kernels
