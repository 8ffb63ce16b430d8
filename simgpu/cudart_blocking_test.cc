// simgpu/cudart_blocking_test.cc: the CUDA runtime double in blocking mode, with the other
// environment variables set (BUILD: STRATA_SIMGPU_MODE=blocking, STRATA_SIMGPU_DEVICES=2,
// STRATA_SIMGPU_MEMORY_BYTES=1 GiB, STRATA_SIMGPU_SEED=7): operations run at once on the
// calling thread, events are complete at once, and device memory faults when the host
// touches it outside an operation.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "simgpu/work.h"

namespace {

TEST(Blocking, EnvironmentIsRead) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(simgpu::Seed(), 7u);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total, size_t{1} << 30);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, (size_t{1} << 30) + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  // Memory is counted per device.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  cudaPointerAttributes attributes;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, p), cudaSuccess);
  EXPECT_EQ(attributes.device, 1);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free1, total - (1 << 20));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free1, total);
  // The current device is per host thread.
  std::thread([] {
    int device = -1;
    cudaGetDevice(&device);
    EXPECT_EQ(device, 0);
  }).join();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

TEST(Blocking, OperationsRunAtEnqueueOnTheCallingThread) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  std::thread::id ran_on;
  ASSERT_EQ(simgpu::Enqueue(stream, "op", {}, [&ran_on] {
              ran_on = std::this_thread::get_id();
              return std::string();
            }),
            cudaSuccess);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  cudaEvent_t start, end;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(end), cudaSuccess);
  float ms = -1;
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
}

TEST(Blocking, CopiesReachDeviceMemory) {
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 1000), cudaSuccess);
  std::vector<int> in(250), out(250, 0);
  for (int i = 0; i < 250; ++i) in[i] = i * i;
  ASSERT_EQ(cudaMemcpyAsync(device, in.data(), 1000, cudaMemcpyDefault, nullptr), cudaSuccess);
  // An operation (a kernel) may touch device memory while it runs.
  ASSERT_EQ(simgpu::Enqueue(nullptr, "kernel Double", {{device, 1000, true}}, [device] {
              int* values = static_cast<int*>(device);
              for (int i = 0; i < 250; ++i) values[i] *= 2;
              return std::string();
            }),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), device, 1000, cudaMemcpyDeviceToHost, nullptr),
            cudaSuccess);
  for (int i = 0; i < 250; ++i) ASSERT_EQ(out[i], 2 * i * i);
  ASSERT_EQ(cudaMemsetAsync(device, 0, 1000, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), device, 1000, cudaMemcpyDeviceToHost, nullptr),
            cudaSuccess);
  for (int i = 0; i < 250; ++i) ASSERT_EQ(out[i], 0);
  // Pinned memory stays readable by the host.
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  std::memset(pinned, 1, 64);
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  ASSERT_EQ(cudaFree(device), cudaSuccess);
}

TEST(BlockingDeathTest, HostReadOfDevicePointerFaults) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4096), cudaSuccess);
  EXPECT_DEATH(
      {
        volatile int value = *static_cast<volatile int*>(device);
        (void)value;
      },
      "");
  // The same read inside an operation works.
  int seen = -1;
  ASSERT_EQ(simgpu::Enqueue(nullptr, "kernel Read", {{device, 4, false}}, [device, &seen] {
              seen = *static_cast<int*>(device);
              return std::string();
            }),
            cudaSuccess);
  EXPECT_EQ(seen, 0);
  cudaFree(device);
}

}  // namespace
