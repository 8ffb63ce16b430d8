// Deterministic collective test data and expected results. See test_pattern.h.
#include "collectives/test_pattern.h"

#include <cstring>

namespace strata {
namespace testing_pattern {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

float Round(float value, DType dtype) {
  return dtype == DType::kBF16 ? ToFloat(ToBf16(value)) : value;
}

void Put(std::vector<uint8_t>& bytes, size_t index, float value, DType dtype) {
  if (dtype == DType::kF32) {
    std::memcpy(bytes.data() + index * 4, &value, 4);
  } else {
    const bf16 rounded = ToBf16(value);
    std::memcpy(bytes.data() + index * 2, &rounded, 2);
  }
}

float Get(const void* data, size_t index, DType dtype) {
  if (dtype == DType::kF32) return static_cast<const float*>(data)[index];
  return ToFloat(static_cast<const bf16*>(data)[index]);
}

}  // namespace

float Value(int rank, uint64_t step, size_t index, DType dtype) {
  const uint64_t bits = Mix(Mix(static_cast<uint64_t>(rank) * 0x100000001b3ull + step) ^ index);
  // Built from bits (fast, exact): a 23-bit mantissa, an exponent in [-8, 8], a sign.
  const uint32_t mantissa = static_cast<uint32_t>(bits & 0x7fffff);
  const uint32_t exponent = static_cast<uint32_t>(127 - 8 + (bits >> 23) % 17);
  const uint32_t sign = static_cast<uint32_t>((bits >> 40) & 1);
  const uint32_t word = sign << 31 | exponent << 23 | mantissa;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return Round(value, dtype);
}

void Fill(void* data, size_t count, DType dtype, int rank, uint64_t step, size_t first_index) {
  for (size_t i = 0; i < count; ++i) {
    const float value = Value(rank, step, first_index + i, dtype);
    if (dtype == DType::kF32) {
      static_cast<float*>(data)[i] = value;
    } else {
      static_cast<bf16*>(data)[i] = ToBf16(value);
    }
  }
}

float RankOrderSum(int world_size, uint64_t step, size_t index, DType dtype) {
  float acc = Value(0, step, index, dtype);
  for (int r = 1; r < world_size; ++r) acc += Value(r, step, index, dtype);
  return Round(acc, dtype);
}

float ReverseOrderSum(int world_size, uint64_t step, size_t index, DType dtype) {
  float acc = Value(world_size - 1, step, index, dtype);
  for (int r = world_size - 2; r >= 0; --r) acc += Value(r, step, index, dtype);
  return Round(acc, dtype);
}

float RoundedEachStepSum(int world_size, uint64_t step, size_t index, DType dtype) {
  float acc = Value(0, step, index, dtype);
  for (int r = 1; r < world_size; ++r) acc = Round(acc + Value(r, step, index, dtype), dtype);
  return acc;
}

std::vector<uint8_t> Expected(CollectiveOp op, int rank, int world_size, size_t count, DType dtype,
                              uint64_t step, int root) {
  const size_t elements = op == CollectiveOp::kAllGather ? count * world_size : count;
  std::vector<uint8_t> bytes(elements * DTypeBytes(dtype));
  for (size_t i = 0; i < elements; ++i) {
    float value = 0;
    switch (op) {
      case CollectiveOp::kAllReduce:
        value = RankOrderSum(world_size, step, i, dtype);
        break;
      case CollectiveOp::kReduceScatter:
        value = RankOrderSum(world_size, step, rank * count + i, dtype);
        break;
      case CollectiveOp::kAllGather:
        value = Value(i / count, step, i % count, dtype);
        break;
      case CollectiveOp::kBroadcast:
        value = Value(root, step, i, dtype);
        break;
      case CollectiveOp::kBarrier:
        break;
    }
    Put(bytes, i, value, dtype);
  }
  return bytes;
}

std::string Compare(const void* got, const std::vector<uint8_t>& expected, DType dtype) {
  const size_t element_bytes = DTypeBytes(dtype);
  const size_t elements = expected.size() / element_bytes;
  size_t mismatches = 0;
  std::string first;
  const auto* got_bytes = static_cast<const uint8_t*>(got);
  for (size_t i = 0; i < elements; ++i) {
    if (std::memcmp(got_bytes + i * element_bytes, expected.data() + i * element_bytes,
                    element_bytes) == 0) {
      continue;
    }
    if (++mismatches <= 5) {
      absl::StrAppend(&first, absl::StrFormat(" [%d] got %.9g expected %.9g;", i,
                                              Get(got, i, dtype), Get(expected.data(), i, dtype)));
    }
  }
  if (mismatches == 0) return "";
  return absl::StrCat(mismatches, " of ", elements, " ", DTypeName(dtype),
                      " elements differ:", first);
}

}  // namespace testing_pattern
}  // namespace strata
