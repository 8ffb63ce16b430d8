// The keep/drop mask of the Dropout op (kernels/ops.h), written once for every backend: the
// CPU kernels (kernels/cpu/elementwise.cc) and the CUDA kernel (kernels/cuda/elementwise.cu)
// both call these functions, so both draw the identical mask. Compiled by nvcc the functions
// are __host__ __device__; by a plain C++ compiler they are ordinary inline functions.
//
// The mask is a pure function of (key, global row, position, channel) and p, in integer
// arithmetic only (uint64 wrap-around), so it does not depend on the backend, the thread
// count, the launch shape, or how the rows are split over calls, ranks or micro-batches:
//
//   Mix(z)       = the SplitMix64 finaliser: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
//                  z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31  (a bijection)
//   kGamma       = 0x9e3779b97f4a7c15  (2^64 / golden ratio; added before every Mix, so that
//                  an all-zero input does not stay at Mix's fixed point 0)
//   row_hash     = Mix(Mix(Mix(key + kGamma) + row + kGamma) + position + kGamma)
//   h            = Mix(row_hash + channel + kGamma)
//   u            = (h >> 40) * 2^-24, a uniform 24-bit value in [0, 1) (exact in fp32)
//   keep         = !(u < p)
//
// with row, position and channel converted to uint64 (all non-negative in the op). A
// position is dropped with probability ceil(p * 2^24) / 2^24, i.e. p to within 2^-24; p == 0
// keeps everything. row_hash depends on the row and position only, so a kernel computes it
// once per row and then one Mix per channel.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_DROPOUT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define STRATA_DROPOUT_HOST_DEVICE inline
#endif

namespace strata {

inline constexpr uint64_t kDropoutGamma = 0x9e3779b97f4a7c15ull;

// The SplitMix64 finaliser: every output bit depends on every input bit.
STRATA_DROPOUT_HOST_DEVICE uint64_t DropoutMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The part of the hash shared by the channels of one (global row, position).
STRATA_DROPOUT_HOST_DEVICE uint64_t DropoutRowHash(uint64_t key, int64_t row, int64_t position) {
  uint64_t h = DropoutMix(key + kDropoutGamma);
  h = DropoutMix(h + static_cast<uint64_t>(row) + kDropoutGamma);
  return DropoutMix(h + static_cast<uint64_t>(position) + kDropoutGamma);
}

// Whether the channel of the row whose DropoutRowHash is row_hash is kept, for drop
// probability p in [0, 1).
STRATA_DROPOUT_HOST_DEVICE bool DropoutKeepInRow(uint64_t row_hash, int64_t channel, float p) {
  const uint64_t h = DropoutMix(row_hash + static_cast<uint64_t>(channel) + kDropoutGamma);
  const float u = static_cast<float>(h >> 40) * 0x1p-24f;  // both factors exact: u exact
  return !(u < p);
}

// keep(key, row, position, channel) of the Dropout op: the two functions above in one.
STRATA_DROPOUT_HOST_DEVICE bool DropoutKeep(uint64_t key, int64_t row, int64_t position,
                                            int64_t channel, float p) {
  return DropoutKeepInRow(DropoutRowHash(key, row, position), channel, p);
}

}  // namespace strata
