// AdamW with 8-bit moments on CUDA (cuda_kernels.h; specification: docs/quantization.md
// "8-bit Adam states", reference: cpu::Adam8bitReference in kernels/cpu/adam8bit.h).
// One CUDA block of 256 threads per block of kAdamStateBlock = 2048 elements, each thread
// holding 8 elements (i = thread + 256 j) in registers: decode, update (master and param
// written), a block-wide max of |m| and of v (BlockMax: a max, so the order of the reduction
// does not change its bits), then the codes. Every fp32 operation is an explicitly rounded
// intrinsic in the reference's order (no FMA contraction, IEEE division and square root), the
// per-step constants are the host's (kernels/adam_math.h): bit-identical to the reference.
//
// Tables: the two maps come from core/quant_format.h by value as a kernel parameter (2 KB);
// each block copies them to shared memory and derives the decision points there as the host
// does, fp32((double(v[i]) + double(v[i+1])) / 2): the sum of two adjacent map values (within
// a factor 11 of each other, or one of them 0) is exact in double, the halving too, and the
// conversion to fp32 rounds once to nearest, as the host's. (Passing the points as well
// would pass the 4 KB kernel-parameter limit of older toolkits.)
//
// Thread-safety: launchers are reentrant.
#include "core/quant_format.h"
#include "kernels/adam_math.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = static_cast<int>(kAdamStateBlock) / kThreads;  // 8

struct MomentMaps {
  float map[2][256];  // [0]: unsigned (v), [1]: signed (m)
};

MomentMaps MakeMomentMaps() {
  MomentMaps maps;
  for (int i = 0; i < 256; ++i) {
    maps.map[0][i] = DynamicMap(false)[i];
    maps.map[1][i] = DynamicMap(true)[i];
  }
  return maps;
}

// #{i < 255 : y > points[i]}: an 8-step binary search over the sorted points (NaN: 0).
__device__ __forceinline__ uint8_t CodeOf(float y, const float* points) {
  int pos = 0;
  for (int step = 128; step >= 1; step /= 2) {
    if (y > points[pos + step - 1]) pos += step;
  }
  return static_cast<uint8_t>(pos);
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    AdamW8bitKernel(S* param, float* master, const float* grad, uint8_t* m_codes, float* m_absmax,
                    uint8_t* v_codes, float* v_absmax, size_t n, AdamConstants k, MomentMaps maps) {
  __shared__ float map[2][256];
  __shared__ float points[2][256];
  __shared__ float scratch[32];
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) {
    map[0][i] = maps.map[0][i];
    map[1][i] = maps.map[1][i];
  }
  __syncthreads();
  for (unsigned i = threadIdx.x; i < 255; i += blockDim.x) {
    for (int s = 0; s < 2; ++s) {
      // (a + b) * 0.5 has no product to fuse with a sum; both steps are exact in double.
      points[s][i] = static_cast<float>(
          (static_cast<double>(map[s][i]) + static_cast<double>(map[s][i + 1])) * 0.5);
    }
  }
  __syncthreads();

  const size_t block = blockIdx.x;
  const size_t begin = block * kAdamStateBlock;
  const size_t len = n - begin < kAdamStateBlock ? n - begin : kAdamStateBlock;
  const float m_scale = m_absmax[block], v_scale = v_absmax[block];
  float m_new[kPerThread], v_new[kPerThread];
  float m_max = 0.0f, v_max = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const size_t local = threadIdx.x + static_cast<size_t>(j) * kThreads;
    m_new[j] = v_new[j] = 0.0f;
    if (local >= len) continue;
    const size_t i = begin + local;
    const float m_old = __fmul_rn(map[1][m_codes[i]], m_scale);
    const float v_old = __fmul_rn(map[0][v_codes[i]], v_scale);
    const float g = __fmul_rn(grad[i], k.grad_scale);
    const float m = __fadd_rn(__fmul_rn(k.beta1, m_old), __fmul_rn(k.one_minus_beta1, g));
    const float v =
        __fadd_rn(__fmul_rn(k.beta2, v_old), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float m_hat = __fdiv_rn(m, k.bias_correction1);
    const float v_hat = __fdiv_rn(v, k.bias_correction2);
    const float p = master[i];
    const float update = __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), k.eps)),
                                   __fmul_rn(k.weight_decay, p));
    const float p_new = __fadd_rn(p, -__fmul_rn(k.lr, update));
    master[i] = p_new;
    if (param != nullptr) DeviceStore(param + i, p_new);
    m_new[j] = m;
    v_new[j] = v;
    m_max = fmaxf(m_max, fabsf(m));
    v_max = fmaxf(v_max, fabsf(v));
  }
  m_max = BlockMax(m_max, scratch);
  v_max = BlockMax(v_max, scratch);
  // The stored absmax: 0 below kQuantMinAbsmax (the block's codes are then the code of 0).
  const float m_stored = m_max < kQuantMinAbsmax ? 0.0f : m_max;
  const float v_stored = v_max < kQuantMinAbsmax ? 0.0f : v_max;
  if (threadIdx.x == 0) {
    m_absmax[block] = m_stored;
    v_absmax[block] = v_stored;
  }
  const float m_inverse = m_stored == 0.0f ? 0.0f : __fdiv_rn(1.0f, m_stored);
  const float v_inverse = v_stored == 0.0f ? 0.0f : __fdiv_rn(1.0f, v_stored);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const size_t local = threadIdx.x + static_cast<size_t>(j) * kThreads;
    if (local >= len) continue;
    const size_t i = begin + local;
    // With a zero absmax every value is encoded as 0.0 (y = 0 * 0).
    m_codes[i] = CodeOf(m_stored == 0.0f ? 0.0f : __fmul_rn(m_new[j], m_inverse), points[1]);
    v_codes[i] = CodeOf(v_stored == 0.0f ? 0.0f : __fmul_rn(v_new[j], v_inverse), points[0]);
  }
}

}  // namespace

Status AdamW8bit(DType dtype, void* param, float* master, const float* grad, uint8_t* m_codes,
                 float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n, const AdamParams& hp,
                 cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  const AdamConstants k = MakeAdamConstants(hp);
  static const MomentMaps maps = MakeMomentMaps();
  const size_t blocks = (n + kAdamStateBlock - 1) / kAdamStateBlock;
  if (blocks > 0x7fffffffu) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW8bit: ", n, " elements is too many"));
  }
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AdamW8bitKernel<S>>(static_cast<unsigned>(blocks), kThreads, 0, stream,
                                                static_cast<S*>(param), master, grad, m_codes,
                                                m_absmax, v_codes, v_absmax, n, k, maps);
    return 0;
  });
  return LaunchStatus("AdamW8bitKernel", n);
}

}  // namespace strata::cuda_kernels
