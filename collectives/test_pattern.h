// Test data for collectives, in the style of nccl-tests: every rank fills its buffers from
// (rank, step, index), so every rank can compute the exact expected result of any
// collective on its own and compare bytes. Values span 2^-8..2^8 in magnitude with random
// signs, so a sum in another order than 0..N-1 gives different bits for many elements.
// The expected sums here are written independently of reduce.h: a scalar loop per element.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/dtype.h"

namespace strata {
namespace testing_pattern {

// The value rank `rank` holds at `index` in step `step`, exactly representable in `dtype`.
float Value(int rank, uint64_t step, size_t index, DType dtype);

// data[i] = Value(rank, step, first_index + i) for i < count, stored as `dtype`.
void Fill(void* data, size_t count, DType dtype, int rank, uint64_t step, size_t first_index = 0);

// The fixed-order sum of Value(r, step, index) over r = 0..world_size-1 (in that order, in
// fp32, rounded once to `dtype`), as an fp32 value.
float RankOrderSum(int world_size, uint64_t step, size_t index, DType dtype);

// The same elements summed in REVERSE rank order: a different order, to show that a test
// would notice one (for fp32; bf16 inputs of this pattern sum exactly in fp32).
float ReverseOrderSum(int world_size, uint64_t step, size_t index, DType dtype);

// The same elements in rank order but rounded to `dtype` after every addition, as a ring
// that passes bf16 partial sums would: to show that a test would notice that for bf16.
float RoundedEachStepSum(int world_size, uint64_t step, size_t index, DType dtype);

// The bytes each rank must hold after the collective, for inputs filled as described:
// - all_reduce: data[i] = Value(rank, step, i); expected[i] = RankOrderSum(i).
// - reduce_scatter: input[k] = Value(rank, step, k) for k < world * count;
//   expected[i] = RankOrderSum(rank * count + i).
// - all_gather: input[i] = Value(rank, step, i); expected[j * count + i] = Value(j, step, i).
// - broadcast: root's data[i] = Value(root, step, i); expected[i] = that on every rank.
std::vector<uint8_t> Expected(CollectiveOp op, int rank, int world_size, size_t count, DType dtype,
                              uint64_t step, int root = 0);

// Empty when `got` equals `expected` byte for byte; otherwise the number of differing
// elements and the first few, with their values.
std::string Compare(const void* got, const std::vector<uint8_t>& expected, DType dtype);

}  // namespace testing_pattern
}  // namespace strata
