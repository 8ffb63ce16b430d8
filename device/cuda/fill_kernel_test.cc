// The fill kernel through the cuda_library rule, on a CUDA Device's streams: kernels
// ordered by an event across two streams, copied back and checked element by element.
// Built only where CUDA is; skips without a usable GPU.
#include "device/cuda/fill_kernel.h"

#include <gtest/gtest.h>

#include <vector>

#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_native.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

TEST(FillKernel, FillsInStreamOrderAcrossStreams) {
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) GTEST_SKIP() << "no usable GPU: " << count.status();
  if (*count == 0) GTEST_SKIP() << "no usable GPU: cudaGetDeviceCount found 0 devices";

  CudaDeviceOptions options;
  options.device_memory_bytes = 256ull << 20;
  ASSERT_OK_AND_ASSIGN(auto device, CreateCudaDevice(options));
  ASSERT_OK_AND_ASSIGN(auto compute, device->CreateStream("compute"));
  ASSERT_OK_AND_ASSIGN(auto copy, device->CreateStream("d2h"));
  ASSERT_OK_AND_ASSIGN(auto filled, device->CreateEvent());
  ASSERT_OK_AND_ASSIGN(cudaStream_t compute_stream, NativeStream(*compute));

  // Odd sizes: a partial last block, and more elements than one grid covers.
  for (size_t floats : {size_t{1}, size_t{1000}, size_t{(1 << 24) + 17}}) {
    const size_t bytes = floats * sizeof(float);
    ASSERT_OK_AND_ASSIGN(auto data,
                         device->Allocate(Tier::kDevice, StateKind::kActivations, bytes, "fill"));
    ASSERT_OK_AND_ASSIGN(
        auto host, device->Allocate(Tier::kHost, StateKind::kActivations, bytes, "fill copy"));
    ASSERT_OK(FillAsync(data.as<float>(), 1.0f, floats, compute_stream));
    ASSERT_OK(FillAsync(data.as<float>(), 2.5f, floats, compute_stream));
    ASSERT_OK(device->Record(*filled, *compute));
    ASSERT_OK(device->Wait(*copy, *filled));
    ASSERT_OK(device->CopyAsync(host.data(), data.data(), bytes, *copy));
    ASSERT_OK(copy->Synchronize());
    for (size_t i = 0; i < floats; ++i) {
      ASSERT_EQ(host.as<float>()[i], 2.5f) << "element " << i << " of " << floats;
    }
  }
  EXPECT_OK(FillAsync(nullptr, 0.0f, 0, compute_stream));
  EXPECT_OK(compute->Synchronize());
}

}  // namespace
}  // namespace strata
