// Tests of the SIMT executor and the CUDA language for g++ (simt.h): kernels written here run
// through RunGrid (deadlocks and misuse: their errors would make the runtime double's device
// error sticky) and through simgpu::Launch on the runtime double (launch checks, results
// through device memory). Every case checks values, not only that nothing failed.
#include "simgpu/simt.h"  // first, as --config=simgpu force-includes it into every .cu

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "simgpu/executor.h"

namespace {

using ::testing::HasSubstr;

constexpr unsigned kFull = 0xffffffffu;

// Runs kernel(args...) as a grid through RunGrid; the arguments are shared by every thread.
template <typename... Params, typename... Args>
std::string RunKernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                size_t shared_bytes, uint64_t seed, Args... args) {
  return simgpu::RunGrid(name, grid, block, shared_bytes, seed, [&] { kernel(args...); });
}

// --- Indexing ---------------------------------------------------------------------------

__global__ void IndexKernel(int* writes, uint3* thread_of, uint3* block_of, dim3* dims) {
  const unsigned block_linear = blockIdx.x + blockIdx.y * gridDim.x +
                                blockIdx.z * gridDim.x * gridDim.y;
  const unsigned thread_linear = threadIdx.x + threadIdx.y * blockDim.x +
                                 threadIdx.z * blockDim.x * blockDim.y;
  const unsigned index = block_linear * (blockDim.x * blockDim.y * blockDim.z) + thread_linear;
  writes[index] += 1;
  thread_of[index] = threadIdx;
  block_of[index] = blockIdx;
  if (index == 0) {
    dims[0] = gridDim;
    dims[1] = blockDim;
  }
}

TEST(ExecutorTest, EveryThreadOfA3DGridRunsOnceWithItsCoordinates) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int total = 3 * 2 * 2 * 4 * 3 * 2;
  std::vector<int> writes(total, 0);
  std::vector<uint3> thread_of(total), block_of(total);
  dim3 dims[2];
  ASSERT_EQ(RunKernel("IndexKernel", IndexKernel, grid, block, 0, 7, writes.data(), thread_of.data(),
                block_of.data(), dims),
            "");
  EXPECT_EQ(dims[0].x, 3u);
  EXPECT_EQ(dims[0].y, 2u);
  EXPECT_EQ(dims[0].z, 2u);
  EXPECT_EQ(dims[1].x, 4u);
  EXPECT_EQ(dims[1].y, 3u);
  EXPECT_EQ(dims[1].z, 2u);
  int index = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++index) {
              ASSERT_EQ(writes[index], 1) << index;
              EXPECT_EQ(thread_of[index].x, tx);
              EXPECT_EQ(thread_of[index].y, ty);
              EXPECT_EQ(thread_of[index].z, tz);
              EXPECT_EQ(block_of[index].x, bx);
              EXPECT_EQ(block_of[index].y, by);
              EXPECT_EQ(block_of[index].z, bz);
            }
}

// --- Barriers and static shared memory --------------------------------------------------

constexpr int kReduceThreads = 256;

// A tree reduction through static shared memory: wrong without every barrier.
__global__ void TreeSumKernel(const float* in, float* out) {
  __shared__ float partial[kReduceThreads];
  const int t = threadIdx.x;
  partial[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

TEST(ExecutorTest, BlockReductionThroughStaticSharedMemoryAndBarriers) {
  constexpr int kBlocks = 5;
  std::vector<float> in(kBlocks * kReduceThreads), out(kBlocks, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);
  ASSERT_EQ(RunKernel("TreeSumKernel", TreeSumKernel, dim3(kBlocks), dim3(kReduceThreads), 0, 3,
                static_cast<const float*>(in.data()), out.data()),
            "");
  for (int b = 0; b < kBlocks; ++b) {
    float expected = 0;
    for (int t = 0; t < kReduceThreads; ++t) expected += in[b * kReduceThreads + t];
    EXPECT_EQ(out[b], expected) << "block " << b;  // integers: exact in any order
  }
}

// Threads that returned count as arrived at later barriers.
__global__ void EarlyExitKernel(int* out, int live) {
  __shared__ int values[32];
  const int t = threadIdx.x;
  if (t >= live) return;
  values[t] = t * 10;
  __syncthreads();
  out[t] = values[(t + 1) % live];
  __syncthreads();
  values[t] = -t;
  __syncthreads();
  out[32 + t] = values[live - 1 - t];
}

TEST(ExecutorTest, ExitedThreadsDoNotBlockABarrier) {
  std::vector<int> out(64, 12345);
  ASSERT_EQ(RunKernel("EarlyExitKernel", EarlyExitKernel, dim3(1), dim3(32), 0, 1, out.data(), 20), "");
  for (int t = 0; t < 20; ++t) {
    EXPECT_EQ(out[t], ((t + 1) % 20) * 10) << t;
    EXPECT_EQ(out[32 + t], -(19 - t)) << t;
  }
  for (int t = 20; t < 32; ++t) EXPECT_EQ(out[t], 12345) << t;
}

// --- Warp operations --------------------------------------------------------------------

template <typename T>
__global__ void ShuffleKernel(T* broadcast, T* butterfly, T* segment_sums, T* segment_index,
                              T* up, T* down, T* xor_beyond) {
  const T value = static_cast<T>(threadIdx.x) + static_cast<T>(0.5);
  broadcast[threadIdx.x] = __shfl_sync(kFull, value, 3);
  T sum = value;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFull, sum, offset);
  butterfly[threadIdx.x] = sum;
  T segment = value;  // sums over segments of 8 lanes
  for (int offset = 4; offset > 0; offset /= 2) segment += __shfl_xor_sync(kFull, segment, offset, 8);
  segment_sums[threadIdx.x] = segment;
  segment_index[threadIdx.x] = __shfl_sync(kFull, value, 17, 16);  // lane 1 of its 16
  up[threadIdx.x] = __shfl_up_sync(kFull, value, 2, 8);
  down[threadIdx.x] = __shfl_down_sync(kFull, value, 3, 16);
  // A butterfly partner in a later segment of 8 reads the lane itself; an earlier one is read.
  xor_beyond[threadIdx.x] = __shfl_xor_sync(kFull, value, 8, 8);
}

template <typename T>
void CheckShuffles() {
  constexpr int kThreads = 64;
  std::vector<T> broadcast(kThreads), butterfly(kThreads), segment_sums(kThreads),
      segment_index(kThreads), up(kThreads), down(kThreads), xor_beyond(kThreads);
  ASSERT_EQ(RunKernel("ShuffleKernel", ShuffleKernel<T>, dim3(2), dim3(kThreads), 0, 1,
                broadcast.data(), butterfly.data(), segment_sums.data(), segment_index.data(),
                up.data(), down.data(), xor_beyond.data()),
            "");
  auto value = [](int t) { return static_cast<T>(t) + static_cast<T>(0.5); };
  for (int t = 0; t < kThreads; ++t) {
    const int warp_begin = t / 32 * 32, lane = t % 32;
    EXPECT_EQ(broadcast[t], value(warp_begin + 3)) << t;
    // The butterfly adds in the same order in every lane: compute it the same way.
    std::vector<T> lanes(32);
    for (int l = 0; l < 32; ++l) lanes[l] = value(warp_begin + l);
    for (int offset = 16; offset > 0; offset /= 2) {
      std::vector<T> next(32);
      for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ offset];
      lanes = next;
    }
    EXPECT_EQ(butterfly[t], lanes[lane]) << t;
    T expected_segment = 0;
    for (int l = lane / 8 * 8; l < lane / 8 * 8 + 8; ++l) expected_segment += value(warp_begin + l);
    EXPECT_EQ(segment_sums[t], expected_segment) << t;
    EXPECT_EQ(segment_index[t], value(warp_begin + lane / 16 * 16 + 1)) << t;
    EXPECT_EQ(up[t], lane % 8 >= 2 ? value(t - 2) : value(t)) << t;
    EXPECT_EQ(down[t], lane % 16 + 3 < 16 ? value(t + 3) : value(t)) << t;
    EXPECT_EQ(xor_beyond[t], (lane & 8) != 0 ? value(t - 8) : value(t)) << t;
  }
}

TEST(ExecutorTest, ShufflesOnFloat) { CheckShuffles<float>(); }
TEST(ExecutorTest, ShufflesOnDouble) { CheckShuffles<double>(); }

__global__ void VoteKernel(unsigned* ballots, int* anys, int* alls, int* first_set) {
  const int lane = threadIdx.x % warpSize;
  const unsigned ballot = __ballot_sync(kFull, lane % 3 == 0);
  ballots[threadIdx.x] = ballot;
  anys[2 * threadIdx.x] = __any_sync(kFull, lane == 7);
  anys[2 * threadIdx.x + 1] = __any_sync(kFull, 0);
  alls[threadIdx.x] = __all_sync(kFull, lane < 32);
  first_set[threadIdx.x] = __ffs(static_cast<int>(__ballot_sync(kFull, lane >= 9)));
  if (lane < 16) {  // half a warp with its own mask
    ballots[32 + threadIdx.x] = __ballot_sync(0x0000ffffu, lane % 2 == 1);
  }
}

TEST(ExecutorTest, BallotAnyAllAndFfs) {
  std::vector<unsigned> ballots(48, 0);
  std::vector<int> anys(64, -1), alls(32, -1), first_set(32, -1);
  ASSERT_EQ(RunKernel("VoteKernel", VoteKernel, dim3(1), dim3(32), 0, 1, ballots.data(), anys.data(),
                alls.data(), first_set.data()),
            "");
  unsigned expected = 0;
  for (int l = 0; l < 32; l += 3) expected |= 1u << l;
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(ballots[t], expected) << t;
    EXPECT_EQ(anys[2 * t], 1) << t;
    EXPECT_EQ(anys[2 * t + 1], 0) << t;
    EXPECT_EQ(alls[t], 1) << t;
    EXPECT_EQ(first_set[t], 10) << t;
  }
  for (int t = 0; t < 16; ++t) EXPECT_EQ(ballots[32 + t], 0x0000aaaau) << t;
  EXPECT_EQ(__ffs(0), 0);
  EXPECT_EQ(__ffs(static_cast<int>(0x80000000u)), 32);
}

// --- 1024 threads -----------------------------------------------------------------------

// BlockSum as kernels/cuda/device_util.cuh writes it: warp butterflies, then one warp over
// the warps' sums through shared memory.
__global__ void BlockSumKernel(const double* in, double* out) {
  __shared__ double scratch[32];
  const int t = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int lane = t % 32, warp = t / 32;
  double value = in[t];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFull, value, offset);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  double total = lane < threads / 32 ? scratch[lane] : 0.0;
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(kFull, total, offset);
  out[t] = total;
}

TEST(ExecutorTest, BlocksOf1024Threads) {
  std::vector<double> in(1024);
  for (int i = 0; i < 1024; ++i) in[i] = i * 0.25;
  const double expected = std::accumulate(in.begin(), in.end(), 0.0);  // exact: multiples of 1/4
  for (const dim3 block : {dim3(1024), dim3(32, 32), dim3(16, 8, 8)}) {
    std::vector<double> out(1024, -1.0);
    ASSERT_EQ(RunKernel("BlockSumKernel", BlockSumKernel, dim3(2), block, 0, 1,
                  static_cast<const double*>(in.data()), out.data()),
              "");
    for (int t = 0; t < 1024; ++t) ASSERT_EQ(out[t], expected) << t;
  }
}

// --- Misuse: errors, not hangs ----------------------------------------------------------

// Counts the kernel threads' destructors, to see abandoned threads unwound.
int destroyed = 0;
struct CountsDestruction {
  ~CountsDestruction() { ++destroyed; }
};

__global__ void SkippedBarrierKernel(float* out) {
  CountsDestruction local;
  float value = threadIdx.x;
  if (threadIdx.x != 5) __syncthreads();
  value = __shfl_sync(kFull, value, 0);
  out[threadIdx.x] = value;
}

TEST(ExecutorTest, ABarrierSkippedByALiveThreadIsAnErrorNamingKernelBlockAndWaits) {
  std::vector<float> out(32, -1.0f);
  destroyed = 0;
  const std::string error =
      RunKernel("SkippedBarrierKernel", SkippedBarrierKernel, dim3(4), dim3(32), 0, 1, out.data());
  EXPECT_THAT(error, HasSubstr("kernel SkippedBarrierKernel block ("));
  EXPECT_THAT(error, HasSubstr("__syncthreads reached by 31 of 32 live threads"));
  EXPECT_THAT(error, HasSubstr("thread (5,0,0) waits at __shfl_sync mask 0xffffffff "
                               "(its lane 0 waits at __syncthreads)"));
  EXPECT_EQ(destroyed, 32);  // every thread of the failed block unwound; no other block ran
  for (float value : out) EXPECT_EQ(value, -1.0f);
}

__global__ void MixedWarpOperationsKernel(int* out) {
  const int lane = threadIdx.x % warpSize;
  if (lane < 16) {
    out[threadIdx.x] = __ballot_sync(kFull, 1);
  } else {
    out[threadIdx.x] = __shfl_sync(kFull, lane, 0);
  }
}

TEST(ExecutorTest, LanesOfOneMaskAtDifferentOperationsAreAnError) {
  std::vector<int> out(32);
  const std::string error = RunKernel("MixedWarpOperationsKernel", MixedWarpOperationsKernel, dim3(1),
                                dim3(32), 0, 1, out.data());
  EXPECT_THAT(error, HasSubstr("kernel MixedWarpOperationsKernel block (0,0,0): deadlock: "
                               "thread (0,0,0) waits at __ballot_sync mask 0xffffffff (its lane "
                               "16 waits at __shfl_sync mask 0xffffffff)"));
}

__global__ void ShuffleOutsideMaskKernel(float* out) {
  const int lane = threadIdx.x % warpSize;
  if (lane < 16) out[lane] = __shfl_sync(0x0000ffffu, 1.0f, lane + 16);
}

TEST(ExecutorTest, AShuffleFromALaneOutsideTheMaskIsAnError) {
  std::vector<float> out(32);
  const std::string error = RunKernel("ShuffleOutsideMaskKernel", ShuffleOutsideMaskKernel, dim3(1),
                                dim3(32), 0, 1, out.data());
  EXPECT_THAT(error, HasSubstr("kernel ShuffleOutsideMaskKernel block (0,0,0): thread (0,0,0) "
                               "calls __shfl_sync mask 0x0000ffff reading lane 16, which is not "
                               "in the mask"));
}

__global__ void OwnLaneOutsideMaskKernel(int* out) {
  out[threadIdx.x] = __any_sync(0x0000fffeu, 1);
}

TEST(ExecutorTest, TheCallingLaneOutsideItsMaskIsAnError) {
  std::vector<int> out(32);
  const std::string error = RunKernel("OwnLaneOutsideMaskKernel", OwnLaneOutsideMaskKernel, dim3(1),
                                dim3(32), 0, 1, out.data());
  EXPECT_THAT(error, HasSubstr("thread (0,0,0) (lane 0) calls __any_sync mask 0x0000fffe, whose "
                               "mask does not include its own lane"));
}

// Lane `exiting` returns; the others shuffle with a full mask.
__global__ void ExitedLaneKernel(float* out, int exiting) {
  if (static_cast<int>(threadIdx.x) == exiting) return;
  out[threadIdx.x] = __shfl_sync(kFull, 2.0f, 0);
}

TEST(ExecutorTest, AMaskNamingAnExitedLaneIsAnError) {
  std::vector<float> out(32);
  // Lane 31 runs last: it exits while the others wait.
  std::string error =
      RunKernel("ExitedLaneKernel", ExitedLaneKernel, dim3(1), dim3(32), 0, 1, out.data(), 31);
  EXPECT_THAT(error, HasSubstr("kernel ExitedLaneKernel block (0,0,0): deadlock: thread (0,0,0) "
                               "waits at __shfl_sync mask 0xffffffff (its lane 31 has exited)"));
  // Lane 0 runs first: the others find it exited when they arrive.
  error = RunKernel("ExitedLaneKernel", ExitedLaneKernel, dim3(1), dim3(32), 0, 1, out.data(), 0);
  EXPECT_THAT(error, HasSubstr("thread (1,0,0) calls __shfl_sync mask 0xffffffff, which names "
                               "lane 0 (thread (0,0,0)), which has exited"));
}

TEST(ExecutorTest, AMaskNamingALaneBeyondAPartialWarpIsAnError) {
  std::vector<float> out(48);
  const std::string error =
      RunKernel("ExitedLaneKernel", ExitedLaneKernel, dim3(1), dim3(40), 0, 1, out.data(), -1);
  EXPECT_THAT(error, HasSubstr("thread (32,0,0) calls __shfl_sync mask 0xffffffff, which names "
                               "lane 8 of warp 1; the block has 40 threads"));
}

// Warps at or beyond `live_warps` return at once (their fibers go straight to the next
// thread); the live warps sum their lanes by shuffles and the block's warps through shared
// memory, waiting at barriers the exited warps count as reached.
__global__ void PartlyExitedBlockSumKernel(const int* in, int* out, int live_warps) {
  __shared__ int warp_sums[32];
  const int t = threadIdx.x, lane = t % warpSize, warp = t / warpSize;
  if (warp >= live_warps) return;
  int value = in[blockIdx.x * blockDim.x + t];
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFull, value, offset);
  }
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  int total = lane < live_warps ? warp_sums[lane] : 0;
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    total += __shfl_down_sync(kFull, total, offset);
  }
  __syncthreads();
  if (t == 0) out[blockIdx.x] = total;
  out[gridDim.x + blockIdx.x * blockDim.x + t] = __shfl_sync(kFull, total, 0);
}

TEST(ExecutorTest, ThreadsThatExitAtOnceAndFibersReusedAcrossBlocks) {
  constexpr int kBlocks = 9, kThreads = 256, kLiveWarps = 3;
  std::vector<int> in(kBlocks * kThreads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 7 % 101) - 50;
  std::vector<int> out(kBlocks + kBlocks * kThreads, 12345);
  ASSERT_EQ(RunKernel("PartlyExitedBlockSumKernel", PartlyExitedBlockSumKernel, dim3(kBlocks),
                      dim3(kThreads), 0, 5, static_cast<const int*>(in.data()), out.data(),
                      kLiveWarps),
            "");
  for (int b = 0; b < kBlocks; ++b) {
    int expected = 0;
    for (int t = 0; t < kLiveWarps * 32; ++t) expected += in[b * kThreads + t];
    EXPECT_EQ(out[b], expected) << "block " << b;
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(out[kBlocks + b * kThreads + t], t < kLiveWarps * 32 ? expected : 12345)
          << "block " << b << " thread " << t;
    }
  }
}

TEST(ExecutorTest, FailedBlocksLeaveTheExecutorUsable) {
  std::vector<float> out(1024);
  for (int round = 0; round < 20; ++round) {
    ASSERT_NE(RunKernel("ExitedLaneKernel", ExitedLaneKernel, dim3(2), dim3(1024), 0, round, out.data(),
                  round),
              "");
  }
  std::vector<double> in(1024, 1.0), sums(1024);
  ASSERT_EQ(RunKernel("BlockSumKernel", BlockSumKernel, dim3(1), dim3(1024), 0, 1,
                static_cast<const double*>(in.data()), sums.data()),
            "");
  for (double sum : sums) ASSERT_EQ(sum, 1024.0);
}

// --- Dynamic shared memory --------------------------------------------------------------

// Reads every float of dynamic shared memory before writing it, then writes `count` floats.
__global__ void DynamicSharedKernel(uint32_t* first_bits, int count) {
  float* shared = static_cast<float*>(simgpu::DynamicSharedMemory());
  if (threadIdx.x == 0) {
    first_bits[blockIdx.x] = __float_as_uint(shared[0]);
    for (int i = 0; i < count; ++i) shared[i] = static_cast<float>(i);
  }
}

TEST(ExecutorTest, DynamicSharedMemoryStartsAsNaNInEveryBlock) {
  std::vector<uint32_t> first_bits(3, 0);
  ASSERT_EQ(RunKernel("DynamicSharedKernel", DynamicSharedKernel, dim3(3), dim3(32), 1024, 1,
                first_bits.data(), 256),
            "");
  for (uint32_t bits : first_bits) {
    EXPECT_EQ(bits, 0xffffffffu);
    EXPECT_TRUE(std::isnan(__uint_as_float(bits)));
  }
}

TEST(ExecutorDeathTest, DynamicSharedMemoryOverrunFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint32_t> first_bits(1);
  // 256 floats fit in 1024 bytes; the 257th is past the end.
  EXPECT_DEATH(RunKernel("DynamicSharedKernel", DynamicSharedKernel, dim3(1), dim3(32), 1024, 1,
                   first_bits.data(), 257),
               "");
}

TEST(ExecutorDeathTest, DynamicSharedMemoryOutsideAKernelAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(simgpu::DynamicSharedMemory(), "DynamicSharedMemory used outside a kernel");
}

// --- Block order ------------------------------------------------------------------------

// Appends its block's index to `order`: a result that depends on the order of blocks.
__global__ void BlockOrderKernel(int* order, int* next) {
  if (threadIdx.x == 0) order[(*next)++] = blockIdx.x + blockIdx.y * gridDim.x;
}

std::vector<int> BlockOrder(uint64_t seed) {
  std::vector<int> order(60, -1);
  int next = 0;
  EXPECT_EQ(RunKernel("BlockOrderKernel", BlockOrderKernel, dim3(12, 5), dim3(4), 0, seed, order.data(),
                &next),
            "");
  EXPECT_EQ(next, 60);
  return order;
}

TEST(ExecutorTest, BlocksRunInAnOrderDrawnFromTheSeed) {
  const std::vector<int> first = BlockOrder(1), again = BlockOrder(1), other = BlockOrder(2);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  std::vector<int> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(60);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);  // every block exactly once
  std::vector<int> sorted_other = other;
  std::sort(sorted_other.begin(), sorted_other.end());
  EXPECT_EQ(sorted_other, all);
  EXPECT_NE(first, all);  // not the launch order
}

// --- Intrinsics and names ---------------------------------------------------------------

TEST(SimtTest, FloatIntrinsicsAreIeeeOperations) {
  const float a = 1.1f, b = 3.3f, c = -2.2f;
  EXPECT_EQ(__fadd_rn(a, b), a + b);
  EXPECT_EQ(__fsub_rn(a, b), a - b);
  EXPECT_EQ(__fmul_rn(a, b), a * b);
  EXPECT_EQ(__fdiv_rn(a, b), a / b);
  EXPECT_EQ(__frcp_rn(b), 1.0f / b);
  EXPECT_EQ(__fsqrt_rn(b), std::sqrt(b));
  EXPECT_EQ(__fmaf_rn(a, b, c), std::fma(a, b, c));
  EXPECT_EQ(__float_as_uint(1.0f), 0x3f800000u);
  EXPECT_EQ(__uint_as_float(0xc0000000u), -2.0f);
  EXPECT_EQ(__float_as_int(-0.0f), static_cast<int>(0x80000000u));
  EXPECT_EQ(__int_as_float(0x3f000000), 0.5f);
  EXPECT_EQ(min(3, -4), -4);
  EXPECT_EQ(max(2.5f, 1.0f), 2.5f);
}

template <typename T>
__global__ void NamedKernel(T* out) {
  out[threadIdx.x] = T(1);
}

TEST(SimtTest, KernelNamesAreUnqualified) {
  EXPECT_STREQ(simgpu::KernelName<&NamedKernel<float>>(), "NamedKernel<float>");
  EXPECT_STREQ(simgpu::KernelName<IndexKernel>(), "IndexKernel");
}

// --- simgpu::Launch on the runtime double ---------------------------------------------

__global__ void ScaleKernel(float* out, const float* in, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

// Counts its runs in runs[0]; thread 0 writes every whole float of dynamic shared memory.
__global__ void SharedTouchKernel(int* runs, int floats) {
  float* shared = static_cast<float*>(simgpu::DynamicSharedMemory());
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    for (int i = 0; i < floats; ++i) shared[i] = 1.0f;
    if (blockIdx.x == 0) runs[0] += 1;
  }
}

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  void TearDown() override { EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess); }

  template <typename T>
  T* DeviceCopy(const std::vector<T>& host) {
    void* device = nullptr;
    EXPECT_EQ(cudaMalloc(&device, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T),
                              cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    return static_cast<T*>(device);
  }
  template <typename T>
  std::vector<T> HostCopy(const T* device, size_t count) {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost,
                              stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return host;
  }

  cudaStream_t stream_ = nullptr;
};

TEST_F(LaunchTest, RunsTheKernelOnTheStreamWithConvertedArguments) {
  constexpr int kCount = 100;
  std::vector<float> host_in(kCount);
  for (int i = 0; i < kCount; ++i) host_in[i] = i * 0.5f;
  const float* in = DeviceCopy(host_in);
  float* out = DeviceCopy(std::vector<float>(128, -1.0f));
  // int -> float and size_t -> int, as a CUDA launch converts its arguments.
  simgpu::Launch(simgpu::KernelName<ScaleKernel>(), ScaleKernel, dim3(4), dim3(32), 0, stream_,
                 out, in, 3, size_t{kCount});
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> result = HostCopy(out, 128);
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(result[i], i * 0.5f * 3.0f) << i;
  for (int i = kCount; i < 128; ++i) EXPECT_EQ(result[i], -1.0f) << i;
  EXPECT_EQ(cudaFree(const_cast<float*>(in)), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST_F(LaunchTest, LaunchesBeyondAnH200sLimitsFailWithTheRuntimesErrorsAndDoNotRun) {
  int* runs = DeviceCopy(std::vector<int>{0});
  auto launch = [&](dim3 grid, dim3 block, size_t shared_bytes) {
    simgpu::Launch("SharedTouchKernel", SharedTouchKernel, grid, block, shared_bytes, stream_,
                   runs, static_cast<int>(shared_bytes / sizeof(float)));
    const cudaError_t error = cudaGetLastError();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error is not sticky";
    return error;
  };
  EXPECT_EQ(launch(dim3(1), dim3(1025), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1), dim3(32, 33), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1), dim3(1, 1, 65), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1), dim3(0), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(0), dim3(32), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1, 65536), dim3(32), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1, 1, 65536), dim3(32), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1), dim3(32), 49153), cudaErrorInvalidValue);
  EXPECT_EQ(HostCopy(runs, 1)[0], 0) << "a failed launch ran";

  EXPECT_EQ(launch(dim3(1), dim3(1024), 49152), cudaSuccess);  // the default limit
  EXPECT_EQ(launch(dim3(1), dim3(16, 16, 4), 0), cudaSuccess);
  ASSERT_EQ(cudaFuncSetAttribute(SharedTouchKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 65536),
            cudaSuccess);
  EXPECT_EQ(launch(dim3(1), dim3(32), 49153), cudaSuccess);
  EXPECT_EQ(launch(dim3(1), dim3(32), 65536), cudaSuccess);
  EXPECT_EQ(launch(dim3(1), dim3(32), 65537), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(SharedTouchKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 232448),
            cudaSuccess);
  EXPECT_EQ(launch(dim3(1), dim3(32), 232448), cudaSuccess);  // the opt-in maximum
  EXPECT_EQ(HostCopy(runs, 1)[0], 5);
  ASSERT_EQ(cudaFuncSetAttribute(SharedTouchKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 49152),
            cudaSuccess);
  EXPECT_EQ(cudaFree(runs), cudaSuccess);
}

// Writes through one pointer (an access that is a write) or reads (const: a read).
__global__ void WriteKernel(float* data) { data[threadIdx.x] = 1.0f; }
__global__ void ReadKernel(float* out, const float* data) {
  if (out != nullptr) out[threadIdx.x] = data[threadIdx.x];
}

// The pointer arguments reach the runtime double's race check: two unordered readers are
// fine, an unordered writer is a race. Run in a child process, as a race is sticky.
TEST(LaunchDeathTest, PointerArgumentsAreTheKernelsAccesses) {
  const char* mode = std::getenv("STRATA_SIMGPU_MODE");
  if (mode != nullptr && std::string(mode) == "blocking") {
    GTEST_SKIP() << "blocking mode checks no accesses";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto race = [](bool second_writes) {
    cudaStream_t first, second;
    if (cudaStreamCreate(&first) != cudaSuccess || cudaStreamCreate(&second) != cudaSuccess) {
      std::_Exit(2);
    }
    void* data = nullptr;
    if (cudaMalloc(&data, 4096) != cudaSuccess) std::_Exit(2);
    simgpu::Launch("ReadKernel", ReadKernel, dim3(1), dim3(32), 0, first, nullptr,
                   static_cast<const float*>(data));
    if (second_writes) {
      simgpu::Launch("WriteKernel", WriteKernel, dim3(1), dim3(32), 0, second,
                     static_cast<float*>(data));
    } else {
      simgpu::Launch("ReadKernel", ReadKernel, dim3(1), dim3(32), 0, second, nullptr,
                     static_cast<const float*>(data));
    }
    std::_Exit(cudaDeviceSynchronize() == cudaSuccess ? 0 : 1);
  };
  EXPECT_EXIT(race(false), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(race(true), ::testing::ExitedWithCode(1), "kernel WriteKernel");
}

}  // namespace
