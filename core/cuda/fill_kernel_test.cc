// The fill kernel through the cuda_library rule, on a CUDA Device's streams: kernels
// ordered by an event across two streams, copied back and checked element by element.
// Built only where CUDA is; skips without a usable GPU.
#include "core/cuda/fill_kernel.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_native.h"

namespace strata {
namespace {

TEST(FillKernel, FillsInStreamOrderAcrossStreams) {
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) GTEST_SKIP() << "no usable GPU: " << count.status();
  if (*count == 0) GTEST_SKIP() << "no usable GPU: cudaGetDeviceCount found 0 devices";

  CudaDeviceOptions options;
  options.device_memory_bytes = 256ull << 20;
  auto device = *CreateCudaDevice(options);
  auto compute = *device->CreateStream("compute");
  auto copy = *device->CreateStream("d2h");
  auto filled = *device->CreateEvent();
  cudaStream_t compute_stream = *NativeStream(*compute);

  // Odd sizes: a partial last block, and more elements than one grid covers.
  for (size_t floats : {size_t{1}, size_t{1000}, size_t{(1 << 24) + 17}}) {
    const size_t bytes = floats * sizeof(float);
    auto data = *device->Allocate(Tier::kDevice, StateKind::kActivations, bytes, "fill");
    auto host = *device->Allocate(Tier::kHost, StateKind::kActivations, bytes, "fill copy");
    ASSERT_TRUE(FillAsync(data.as<float>(), 1.0f, floats, compute_stream).ok());
    ASSERT_TRUE(FillAsync(data.as<float>(), 2.5f, floats, compute_stream).ok());
    ASSERT_TRUE(device->Record(*filled, *compute).ok());
    ASSERT_TRUE(device->Wait(*copy, *filled).ok());
    ASSERT_TRUE(device->CopyAsync(host.data(), data.data(), bytes, *copy).ok());
    ASSERT_TRUE(copy->Synchronize().ok());
    for (size_t i = 0; i < floats; ++i) {
      ASSERT_EQ(host.as<float>()[i], 2.5f) << "element " << i << " of " << floats;
    }
  }
  EXPECT_TRUE(FillAsync(nullptr, 0.0f, 0, compute_stream).ok());
  EXPECT_TRUE(compute->Synchronize().ok());
}

}  // namespace
}  // namespace strata
