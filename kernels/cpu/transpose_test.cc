// Transpose: the reference against the definition (an index formula of its own, per
// element), and the fast version against the reference bit for bit (a copy: no tolerance)
// over shapes with ragged edges (rows or cols not multiples of 8, a single row or column),
// strides wider than the block, and strides that are multiples of 4 KiB (the import's
// case). Elements outside the destination block stay untouched. The same two from bf16
// sources, over every bit pattern (the widening is exact: bits compared).
#include "kernels/cpu/transpose.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

struct Shape {
  size_t rows, cols, source_stride, dest_stride;
};
const Shape kShapes[] = {{1, 1, 1, 1},     {8, 8, 8, 8},       {9, 17, 17, 9},
                         {16, 3, 5, 20},   {3, 16, 1024, 3},   {40, 24, 1024, 1024},
                         {7, 1, 1, 7},     {1, 33, 40, 1},     {64, 72, 80, 70}};

TEST(TransposeTest, ReferenceMatchesTheDefinition) {
  for (const Shape& s : kShapes) {
    const std::vector<float> source = RandomFloats(s.rows * s.source_stride, -1, 1, 7);
    std::vector<float> dest(s.cols * s.dest_stride, 42.0f);
    TransposeReference(source.data(), s.source_stride, s.rows, s.cols, dest.data(),
                       s.dest_stride);
    for (size_t k = 0; k < dest.size(); ++k) {
      const size_t j = k / s.dest_stride, i = k % s.dest_stride;
      const float want = i < s.rows ? source[i * s.source_stride + j] : 42.0f;
      ASSERT_EQ(dest[k], want) << "rows " << s.rows << " cols " << s.cols << " element " << k;
    }
  }
}

TEST(TransposeTest, FastMatchesReferenceBitForBit) {
  for (const Shape& s : kShapes) {
    const std::vector<float> source = RandomFloats(s.rows * s.source_stride, -1, 1, 11);
    std::vector<float> want(s.cols * s.dest_stride, -3.0f), got = want;
    TransposeReference(source.data(), s.source_stride, s.rows, s.cols, want.data(),
                       s.dest_stride);
    Transpose(source.data(), s.source_stride, s.rows, s.cols, got.data(), s.dest_stride);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << "rows " << s.rows << " cols " << s.cols << " strides " << s.source_stride << ", "
        << s.dest_stride;
  }
}

// From bf16: every bit pattern (NaN payloads included) widened exactly, transposed.
std::vector<bf16> EveryBf16(size_t n) {
  std::vector<bf16> values(n);
  for (size_t k = 0; k < n; ++k) values[k] = bf16{static_cast<uint16_t>(k * 40503u + 17)};
  return values;
}

TEST(TransposeTest, FromBf16ReferenceMatchesTheDefinition) {
  for (const Shape& s : kShapes) {
    const std::vector<bf16> source = EveryBf16(s.rows * s.source_stride);
    std::vector<float> dest(s.cols * s.dest_stride, 42.0f);
    TransposeReference(source.data(), s.source_stride, s.rows, s.cols, dest.data(), s.dest_stride);
    for (size_t k = 0; k < dest.size(); ++k) {
      const size_t j = k / s.dest_stride, i = k % s.dest_stride;
      const uint32_t want =
          i < s.rows ? uint32_t{source[i * s.source_stride + j].bits} << 16 : 0x42280000u;  // 42.0f
      uint32_t got;
      std::memcpy(&got, &dest[k], sizeof(got));
      ASSERT_EQ(got, want) << "rows " << s.rows << " cols " << s.cols << " element " << k;
    }
  }
}

TEST(TransposeTest, FromBf16FastMatchesReferenceBitForBit) {
  for (const Shape& s : kShapes) {
    const std::vector<bf16> source = EveryBf16(s.rows * s.source_stride);
    std::vector<float> want(s.cols * s.dest_stride, -3.0f), got = want;
    TransposeReference(source.data(), s.source_stride, s.rows, s.cols, want.data(), s.dest_stride);
    Transpose(source.data(), s.source_stride, s.rows, s.cols, got.data(), s.dest_stride);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << "rows " << s.rows << " cols " << s.cols << " strides " << s.source_stride << ", "
        << s.dest_stride;
  }
}

}  // namespace
}  // namespace strata::cpu
