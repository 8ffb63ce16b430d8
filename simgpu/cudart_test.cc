// simgpu/cudart_test.cc: the CUDA runtime double in ordering mode (the default): devices,
// memory, pinned memory and pointer attributes, stream order, events, host functions,
// cuStreamWaitValue32, errors sticky and not, and the race check of work.h. Scenarios that
// make an error sticky run in death tests (a child process), since nothing clears it.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "simgpu/work.h"

namespace {

using std::chrono::milliseconds;

// A kernel-like operation: reads or writes the page at `pointer` (bytes == 0, as a kernel's
// pointer argument).
cudaError_t Touch(cudaStream_t stream, const char* what, void* pointer, bool write) {
  return simgpu::Enqueue(stream, what, {{pointer, 0, write}}, [] { return std::string(); });
}

TEST(Device, PropertiesAreAnH200s) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_STREQ(p.name, "NVIDIA H200 (simgpu)");
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.minor, 0);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.maxThreadsDim[2], 64);
  EXPECT_EQ(p.maxGridSize[0], 2147483647);
  EXPECT_EQ(p.maxGridSize[1], 65535);
  EXPECT_EQ(p.sharedMemPerBlock, 49152u);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 232448u);
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.totalGlobalMem, 150754820096ull);
  EXPECT_EQ(cudaGetDeviceProperties(&p, 1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(simgpu::Seed(), 1u);
  EXPECT_EQ(simgpu_api()->version, simgpu::kApiVersion);
  EXPECT_EQ(simgpu_api()->device_count(), 1);
}

TEST(Errors, NonStickyIsReturnedOnceByGetLastError) {
  EXPECT_EQ(cudaSetDevice(3), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);  // later calls are unaffected
  EXPECT_EQ(device, 0);
  simgpu::SetLaunchError(cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(Errors, EveryCodeHasANameAndAString) {
  for (int code = 0; code <= 1000; ++code) {
    const std::string name = cudaGetErrorName(static_cast<cudaError_t>(code));
    const std::string text = cudaGetErrorString(static_cast<cudaError_t>(code));
    EXPECT_FALSE(text.empty()) << code;
    EXPECT_EQ(name.rfind("cuda", 0), 0u) << code;
  }
  EXPECT_STREQ(cudaGetErrorName(cudaSuccess), "cudaSuccess");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorLaunchFailure), "cudaErrorLaunchFailure");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorLaunchTimeout), "launch timeout");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorStreamCaptureUnjoined), "cudaErrorStreamCaptureUnjoined");
}

TEST(Memory, MallocFreeAndMemGetInfoAgree) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  EXPECT_EQ(total, 150754820096ull);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, size_t{1} << 20);
  simgpu::Range range = simgpu::FindDeviceAllocation(static_cast<char*>(p) + 1000);
  EXPECT_EQ(range.base, p);
  EXPECT_EQ(range.bytes, size_t{1} << 20);
  EXPECT_EQ(simgpu::FindDeviceAllocation(static_cast<char*>(p) + (1 << 20)).base, nullptr);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  size_t free2 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free2, &total), cudaSuccess);
  EXPECT_EQ(free2, free0);
  EXPECT_EQ(simgpu::FindDeviceAllocation(p).base, nullptr);

  void* too_big = nullptr;
  EXPECT_EQ(cudaMalloc(&too_big, free2 + 4096), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int local = 0;
  EXPECT_EQ(cudaFree(&local), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
}

TEST(Memory, MallocAsyncFromTheDefaultPool) {
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  uint64_t keep = uint64_t{1} << 30;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 10000, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(p, 7, 10000, stream), cudaSuccess);
  std::vector<unsigned char> back(10000);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), p, 10000, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (unsigned char byte : back) ASSERT_EQ(byte, 7);
  EXPECT_EQ(simgpu::FindDeviceAllocation(p).base, nullptr);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(Memory, PinnedMemoryAndPointerAttributes) {
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 8192), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 100, cudaHostAllocMapped), cudaSuccess);
  std::vector<char> registered(1 << 16);
  ASSERT_EQ(cudaHostRegister(registered.data(), registered.size(), cudaHostRegisterDefault),
            cudaSuccess);
  int unregistered = 0;

  cudaPointerAttributes a;
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(device) + 5000), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(pinned) + 99), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  EXPECT_EQ(a.hostPointer, static_cast<char*>(pinned) + 99);
  ASSERT_EQ(cudaPointerGetAttributes(&a, registered.data() + 100), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, &unregistered), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);

  void* mapped = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&mapped, pinned, 0), cudaSuccess);
  EXPECT_EQ(mapped, pinned);
  EXPECT_EQ(cudaHostGetDevicePointer(&mapped, &unregistered, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);

  EXPECT_EQ(cudaHostRegister(registered.data() + 8, 64, cudaHostRegisterDefault),
            cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaGetLastError(), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostUnregister(&unregistered), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaGetLastError(), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaHostUnregister(registered.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(registered.data()), cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
  ASSERT_EQ(cudaPointerGetAttributes(&a, registered.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

TEST(Memory, CopiesOfEveryKind) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  constexpr size_t kBytes = 3 * 4096 + 17;
  void *d1, *d2, *pinned;
  ASSERT_EQ(cudaMalloc(&d1, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d2, kBytes), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&pinned, kBytes, cudaHostAllocDefault), cudaSuccess);
  std::vector<unsigned char> source(kBytes), pageable(kBytes, 0), h2h(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) source[i] = static_cast<unsigned char>(i * 31 + 7);
  std::memcpy(pinned, source.data(), kBytes);
  ASSERT_EQ(cudaMemcpyAsync(d1, pinned, kBytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d2, d1, kBytes, cudaMemcpyDeviceToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d1, 0, kBytes, stream), cudaSuccess);
  // Pageable destination: synchronous, as the runtime's.
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), d2, kBytes, cudaMemcpyDefault, stream), cudaSuccess);
  EXPECT_EQ(pageable, source);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d1, kBytes, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h2h.data(), source.data(), kBytes, cudaMemcpyHostToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(h2h, source);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(static_cast<unsigned char*>(pinned)[i], 0) << i;
  EXPECT_EQ(cudaMemcpyAsync(d1, d2, 8, static_cast<cudaMemcpyKind>(9), stream),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
  cudaFree(d1);
  cudaFree(d2);
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

TEST(Streams, HostFunctionsRunInOrderOnTheStreamsThread) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int device = -1;
  ASSERT_EQ(cudaStreamGetDevice(stream, &device), cudaSuccess);
  EXPECT_EQ(device, 0);
  struct Log {
    std::vector<int> order;
    std::thread::id thread;
    bool same_thread = true;
  } log;
  struct Item {
    Log* log;
    int index;
  };
  std::vector<Item> items;
  for (int i = 0; i < 100; ++i) items.push_back({&log, i});
  for (Item& item : items) {
    ASSERT_EQ(cudaLaunchHostFunc(
                  stream,
                  [](void* data) {
                    auto* it = static_cast<Item*>(data);
                    if (it->index == 0) it->log->thread = std::this_thread::get_id();
                    it->log->same_thread &= it->log->thread == std::this_thread::get_id();
                    it->log->order.push_back(it->index);
                  },
                  &item),
              cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(log.order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(log.order[i], i);
  EXPECT_TRUE(log.same_thread);
  EXPECT_NE(log.thread, std::this_thread::get_id());
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(Touch(stream, "after destroy", nullptr, false), cudaErrorInvalidResourceHandle);
}

void CUDART_CB WaitForFuture(void* data) { static_cast<std::shared_future<void>*>(data)->wait(); }
void CUDART_CB Sleep20ms(void*) { std::this_thread::sleep_for(milliseconds(20)); }
void CUDART_CB SetFlag(void* data) { static_cast<std::atomic<int>*>(data)->store(1); }

TEST(Events, QueryIsNotReadyWhileAHostFunctionBlocks) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);  // never recorded
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_EQ(cudaLaunchHostFunc(stream, WaitForFuture, &released), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // an answer, not an error
  release.set_value();
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, event, event), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaStreamDestroy(stream);
}

TEST(Events, ElapsedTimeIsTheWallTimeBetweenRecords) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaEvent_t start, end;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorInvalidResourceHandle);  // unrecorded
  cudaGetLastError();
  ASSERT_EQ(cudaEventRecord(start, stream), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(stream, Sleep20ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, stream), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(end), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 2000.0f);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
}

TEST(Streams, WaitEventOrdersAnotherStream) {
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> flag{0};
  ASSERT_EQ(cudaLaunchHostFunc(a, WaitForFuture, &released), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, event, 0), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(b, SetFlag, &flag), cudaSuccess);
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(flag.load(), 0);
  release.set_value();
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(flag.load(), 1);
  cudaEventDestroy(event);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST(Streams, LegacyDefaultStreamWaitsForBlockingStreamsOnly) {
  cudaStream_t blocking, non_blocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking), cudaSuccess);
  std::promise<void> release_blocking, release_non_blocking;
  std::shared_future<void> blocking_released = release_blocking.get_future().share();
  std::shared_future<void> non_blocking_released = release_non_blocking.get_future().share();
  ASSERT_EQ(cudaLaunchHostFunc(non_blocking, WaitForFuture, &non_blocking_released), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(blocking, WaitForFuture, &blocking_released), cudaSuccess);
  std::atomic<int> flag{0};
  ASSERT_EQ(cudaLaunchHostFunc(nullptr, SetFlag, &flag), cudaSuccess);
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(flag.load(), 0);  // waits for the blocking stream
  release_blocking.set_value();
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);  // not for the non-blocking one
  EXPECT_EQ(flag.load(), 1);
  release_non_blocking.set_value();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(non_blocking);
}

TEST(Streams, DestroyLetsQueuedWorkFinish) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  static std::atomic<int> flag{0};
  ASSERT_EQ(cudaLaunchHostFunc(stream, Sleep20ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(stream, SetFlag, &flag), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(flag.load(), 0);  // returned at once
  for (int i = 0; i < 400 && flag.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(flag.load(), 1);
}

using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);

WaitValue GetWaitValue() {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &function, 12000,
                                             cudaEnableDefault, &found),
            cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSuccess);
  return reinterpret_cast<WaitValue>(function);
}

TEST(Driver, UnknownSymbolIsNotFound) {
  void* function = &function;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSuccess;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &function, 12000, cudaEnableDefault,
                                             &found),
            cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(function, nullptr);
}

// Each flag: the stream stays blocked with `before` in the word and goes once `after` is.
struct WaitCase {
  unsigned flags;
  uint32_t value, before, after;
};

TEST(Driver, StreamWaitValue32IsReleasedByAHostWrite) {
  WaitValue wait_value = GetWaitValue();
  ASSERT_NE(wait_value, nullptr);
  const WaitCase cases[] = {
      {CU_STREAM_WAIT_VALUE_GEQ, 5, 4, 5},
      {CU_STREAM_WAIT_VALUE_GEQ, 0, 0xfffffff0u, 1},  // compared as (int32_t)(word - value)
      {CU_STREAM_WAIT_VALUE_EQ, 7, 8, 7},
      {CU_STREAM_WAIT_VALUE_AND, 0x4, 0x3, 0x6},
      {CU_STREAM_WAIT_VALUE_NOR, 0xfffffff0u, 0x0f, 0x07},
  };
  void* word = nullptr;
  ASSERT_EQ(cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped), cudaSuccess);
  void* device_word = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&device_word, word, 0), cudaSuccess);
  auto* host = static_cast<std::atomic<uint32_t>*>(word);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const WaitCase& c : cases) {
    host->store(c.before);
    std::atomic<int> flag{0};
    ASSERT_EQ(wait_value(reinterpret_cast<CUstream>(stream),
                         reinterpret_cast<CUdeviceptr>(device_word), c.value, c.flags),
              CUDA_SUCCESS);
    ASSERT_EQ(cudaLaunchHostFunc(stream, SetFlag, &flag), cudaSuccess);
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(flag.load(), 0) << "flags " << c.flags;
    host->store(c.after);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(flag.load(), 1) << "flags " << c.flags;
  }
  EXPECT_EQ(wait_value(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_word),
                       0, 0x7),
            CUDA_ERROR_INVALID_VALUE);
  cudaGetLastError();
  cudaStreamDestroy(stream);
  cudaFreeHost(word);
}

TEST(Functions, DynamicSharedMemoryLimit) {
  static int kernel_a, kernel_b;
  EXPECT_EQ(simgpu::MaxDynamicSharedBytes(&kernel_a), 49152);
  EXPECT_EQ(cudaFuncSetAttribute(&kernel_a, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000),
            cudaSuccess);
  EXPECT_EQ(simgpu::MaxDynamicSharedBytes(&kernel_a), 100000);
  EXPECT_EQ(simgpu::MaxDynamicSharedBytes(&kernel_b), 49152);
  EXPECT_EQ(cudaFuncSetAttribute(&kernel_b, cudaFuncAttributeMaxDynamicSharedMemorySize, 232449),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(simgpu::MaxDynamicSharedBytes(&kernel_b), 49152);
}

// Ordering mode's race check.

class Ordering : public ::testing::Test {
 protected:
  void SetUp() override {
    ::testing::FLAGS_gtest_death_test_style = "threadsafe";
    ASSERT_EQ(cudaStreamCreateWithFlags(&a_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&buffer_, 4 * 4096), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(buffer_);
    cudaStreamDestroy(a_);
    cudaStreamDestroy(b_);
  }
  char* page(int i) { return static_cast<char*>(buffer_) + i * 4096; }

  cudaStream_t a_ = nullptr, b_ = nullptr;
  void* buffer_ = nullptr;
};

// Runs `scenario` in a child; it must see the sticky error after the race and exit 0.
void ExpectRace(void (*scenario)(cudaStream_t, cudaStream_t, char*), cudaStream_t a,
                cudaStream_t b, char* buffer, const char* message) {
  EXPECT_EXIT(
      {
        scenario(a, b, buffer);
        const bool sticky = cudaStreamSynchronize(a) == cudaErrorLaunchFailure &&
                            cudaGetLastError() == cudaErrorLaunchFailure &&
                            cudaGetLastError() == cudaErrorLaunchFailure &&
                            Touch(b, "later", buffer, false) == cudaErrorLaunchFailure;
        std::exit(sticky ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), message);
}

TEST_F(Ordering, UnorderedWriteThenReadIsARace) {
  ExpectRace(
      [](cudaStream_t a, cudaStream_t b, char* buffer) {
        if (Touch(a, "kernel Writer", buffer + 4096 + 64, true) != cudaSuccess) std::exit(2);
        // The racing operation is accepted (and runs); the error is sticky from then on.
        if (Touch(b, "kernel Reader", buffer + 4096, false) != cudaSuccess) std::exit(3);
      },
      a_, b_, static_cast<char*>(buffer_),
      "simgpu: race on device allocation 0x[0-9a-f]+\\+4160: kernel Writer on stream [0-9]+ and "
      "kernel Reader on stream [0-9]+ are not ordered \\(add a cudaStreamWaitEvent");
}

TEST_F(Ordering, UnorderedReadThenWriteIsARace) {
  ExpectRace(
      [](cudaStream_t a, cudaStream_t b, char* buffer) {
        Touch(a, "kernel Reader", buffer, false);
        Touch(b, "cudaMemsetAsync-like", buffer + 100, true);
      },
      a_, b_, static_cast<char*>(buffer_), "kernel Reader on stream [0-9]+ and cudaMemsetAsync-like");
}

TEST_F(Ordering, CopiesAreCheckedWithTheirExactRanges) {
  ExpectRace(
      [](cudaStream_t a, cudaStream_t b, char* buffer) {
        // Pinned: a pageable copy would be synchronous, which orders it.
        void* host = nullptr;
        cudaHostAlloc(&host, 100, cudaHostAllocDefault);
        cudaMemcpyAsync(buffer + 4000, host, 100, cudaMemcpyHostToDevice, a);
        cudaMemcpyAsync(host, buffer + 4099, 1, cudaMemcpyDeviceToHost, b);  // 4099 < 4100
      },
      a_, b_, static_cast<char*>(buffer_), "cudaMemcpyAsync on stream [0-9]+ and cudaMemcpyAsync");
}

TEST_F(Ordering, EventAndStreamWaitEventOrderThem) {
  ASSERT_EQ(Touch(a_, "kernel Writer", page(1), true), cudaSuccess);
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, a_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b_, event, 0), cudaSuccess);
  ASSERT_EQ(Touch(b_, "kernel Reader", page(1), false), cudaSuccess);
  ASSERT_EQ(Touch(b_, "kernel Writer2", page(1), true), cudaSuccess);  // after the read on b
  ASSERT_EQ(cudaStreamSynchronize(b_), cudaSuccess);
  cudaEventDestroy(event);
}

TEST_F(Ordering, EventRecordedBeforeTheWriteDoesNotOrderIt) {
  EXPECT_EXIT(
      {
        cudaEvent_t event;
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
        cudaEventRecord(event, a_);
        Touch(a_, "kernel Writer", page(2), true);
        cudaStreamWaitEvent(b_, event, 0);
        Touch(b_, "kernel Reader", page(2), false);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "kernel Writer on stream [0-9]+ and kernel Reader");
}

TEST_F(Ordering, HostSynchronisationOrdersThem) {
  ASSERT_EQ(Touch(a_, "kernel Writer", page(0), true), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  ASSERT_EQ(Touch(b_, "kernel Reader", page(0), false), cudaSuccess);
  ASSERT_EQ(Touch(a_, "kernel Reader2", page(3), false), cudaSuccess);
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, b_), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
  ASSERT_EQ(Touch(a_, "kernel Writer2", page(0), true), cudaSuccess);  // after b's read
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(Touch(b_, "kernel Writer3", page(3), true), cudaSuccess);  // after a's read
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaEventDestroy(event);
}

TEST_F(Ordering, ReadsDoNotRaceAndPagesAreSeparate) {
  ASSERT_EQ(Touch(a_, "kernel ReaderA", page(0), false), cudaSuccess);
  ASSERT_EQ(Touch(b_, "kernel ReaderB", page(0), false), cudaSuccess);
  ASSERT_EQ(Touch(a_, "kernel WriterA", page(1), true), cudaSuccess);
  ASSERT_EQ(Touch(b_, "kernel WriterB", page(2), true), cudaSuccess);
  // Host memory is not checked.
  static char host[64];
  ASSERT_EQ(simgpu::Enqueue(a_, "host writer", {{host, 64, true}}, [] { return std::string(); }),
            cudaSuccess);
  ASSERT_EQ(simgpu::Enqueue(b_, "host writer", {{host, 64, true}}, [] { return std::string(); }),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(Ordering, BlockingStreamsAreOrderedByTheLegacyStream) {
  cudaStream_t blocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(Touch(blocking, "kernel Writer", page(0), true), cudaSuccess);
  ASSERT_EQ(Touch(nullptr, "kernel Reader", page(0), false), cudaSuccess);
  ASSERT_EQ(Touch(blocking, "kernel Writer2", page(0), true), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(blocking);
}

TEST_F(Ordering, FreeAsyncRacesWithAnUnorderedUse) {
  EXPECT_EXIT(
      {
        void* scratch = nullptr;
        cudaMallocAsync(&scratch, 4096, a_);
        Touch(a_, "kernel Writer", scratch, true);
        cudaFreeAsync(scratch, b_);
        std::exit(cudaStreamSynchronize(b_) == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "kernel Writer on stream [0-9]+ and cudaFreeAsync");
}

TEST(Sticky, AFailedOperationMakesEveryLaterCallFail) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        cudaStream_t stream;
        cudaStreamCreate(&stream);
        std::atomic<int> ran{0};
        simgpu::Enqueue(stream, "kernel Broken", {}, [] { return std::string("index 7 out of range"); });
        simgpu::Enqueue(stream, "kernel After", {}, [&ran] {
          ran = 1;
          return std::string();
        });
        const bool ok = cudaStreamSynchronize(stream) == cudaErrorLaunchFailure &&
                        cudaGetLastError() == cudaErrorLaunchFailure &&
                        cudaPeekAtLastError() == cudaErrorLaunchFailure &&
                        cudaMalloc(nullptr, 8) == cudaErrorLaunchFailure &&
                        cudaSetDevice(0) == cudaErrorLaunchFailure && ran.load() == 0;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "simgpu: kernel Broken failed: index 7 out of range");
}

TEST(Sticky, TheFailureCodeOfTheOperationIsKept) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        simgpu::Enqueue(nullptr, "kernel Trap", {}, [] { return std::string("trap"); },
                        cudaErrorIllegalAddress);
        std::exit(cudaDeviceSynchronize() == cudaErrorIllegalAddress ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "kernel Trap failed: trap");
}

}  // namespace
