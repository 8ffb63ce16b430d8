// Dequantization kernels of a quantized frozen base (cuda_kernels.h; specification:
// docs/quantization.md, reference: kernels/cpu/quantize.h): one thread per output element in
// a grid-stride loop. Every fp32 operation is an explicit __fmul_rn / __fadd_rn / __fdiv_rn,
// so nvcc never contracts a product and a sum into an FMA and the bits are the CPU
// reference's. The NF4 values and the signed dynamic map come from core/quant_format.h (one
// definition): passed by value as a kernel parameter and copied to shared memory by each
// block, where the per-element table lookups are cheap.
// Thread-safety: launchers are reentrant.
#include "core/quant_format.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

struct Nf4Tables {
  float values[16];  // Nf4Values()
  float map[256];    // DynamicMap(true)
};

Nf4Tables MakeNf4Tables() {
  Nf4Tables tables;
  for (int i = 0; i < 16; ++i) tables.values[i] = Nf4Values()[i];
  for (int i = 0; i < 256; ++i) tables.map[i] = DynamicMap(true)[i];
  return tables;
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    DequantizeNf4Kernel(S* out, const uint8_t* codes, const uint8_t* absmax_codes,
                        const float* absmax2, const float* offset, size_t n, Nf4Tables tables) {
  __shared__ float values[16];
  __shared__ float map[256];
  for (unsigned k = threadIdx.x; k < 256; k += blockDim.x) map[k] = tables.map[k];
  for (unsigned k = threadIdx.x; k < 16; k += blockDim.x) values[k] = tables.values[k];
  __syncthreads();
  const float piece_offset = *offset;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const size_t block = i / kQuantBlock;
    const float scale =
        __fadd_rn(__fmul_rn(map[absmax_codes[block]], absmax2[block / kAbsmaxGroup]), piece_offset);
    const uint8_t byte = codes[i / 2];
    const int code = (i & 1) != 0 ? (byte & 15) : (byte >> 4);
    DeviceStore(out + i, __fmul_rn(values[code], scale));
  }
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    DequantizeInt8Kernel(S* out, const int8_t* codes, const float* absmax, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const float scale = __fdiv_rn(absmax[i / kQuantBlock], 127.0f);
    DeviceStore(out + i, __fmul_rn(static_cast<float>(codes[i]), scale));
  }
}

template <typename S>
__global__ void __launch_bounds__(kThreads) WidenBf16Kernel(S* out, const bf16* in, size_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) DeviceStore(out + i, DeviceLoad(in + i));
}

}  // namespace

Status DequantizeNf4(DType dtype, void* out, const uint8_t* codes, const uint8_t* absmax_codes,
                     const float* absmax2, const float* offset, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  static const Nf4Tables tables = MakeNf4Tables();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&DequantizeNf4Kernel<S>>(GridStrideBlocks(n, kThreads), kThreads, 0,
                                                    stream, static_cast<S*>(out), codes,
                                                    absmax_codes, absmax2, offset, n, tables);
    return 0;
  });
  return LaunchStatus("DequantizeNf4Kernel", n);
}

Status DequantizeInt8(DType dtype, void* out, const int8_t* codes, const float* absmax, size_t n,
                      cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&DequantizeInt8Kernel<S>>(
        GridStrideBlocks(n, kThreads), kThreads, 0, stream, static_cast<S*>(out), codes, absmax, n);
    return 0;
  });
  return LaunchStatus("DequantizeInt8Kernel", n);
}

Status WidenBf16(DType dtype, void* out, const bf16* in, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (dtype == DType::kBF16) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out, in, n * sizeof(bf16), cudaMemcpyDeviceToDevice, stream),
        absl::StrCat("WidenBf16: copying ", n, " bf16 values"));
    return absl::OkStatus();
  }
  ::strata::cuda::Launch<&WidenBf16Kernel<float>>(GridStrideBlocks(n, kThreads), kThreads, 0,
                                                  stream, static_cast<float*>(out), in, n);
  return LaunchStatus("WidenBf16Kernel", n);
}

}  // namespace strata::cuda_kernels
