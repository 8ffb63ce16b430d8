// CopyHeads CPU kernels: the fast version equals the reference bit for bit (float and bf16,
// odd thread count, q and k head ranges, a range of one head, a size past the parallel
// threshold); the reference against each element's position written out; rows -> qkv
// touches only the chosen heads; qkv -> rows -> qkv is the identity.
#include "kernels/cpu/heads.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

struct Shape {
  int N, heads_per_row, first, count, hs;
};
// (q: 4 | k: 2 | v: 2) heads of 6: the q heads, the k heads, one head; a large one.
const Shape kShapes[] = {{5, 8, 0, 4, 6}, {5, 8, 4, 2, 6}, {3, 3, 1, 1, 8}, {700, 12, 8, 2, 128}};

std::string Name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " heads=" + std::to_string(s.heads_per_row) +
         " first=" + std::to_string(s.first) + " count=" + std::to_string(s.count) +
         " hs=" + std::to_string(s.hs);
}

template <typename T>
class HeadsTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(HeadsTest, StorageTypes);

TYPED_TEST(HeadsTest, FastEqualsReferenceAndThePositions) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    const size_t qkv_size = size_t(s.N) * s.heads_per_row * s.hs;
    const size_t rows_size = size_t(s.N) * s.count * s.hs;
    const std::vector<T> qkv = ToStorage<T>(RandomFloats(qkv_size, -2.0f, 2.0f, 1));
    const std::vector<T> rows = ToStorage<T>(RandomFloats(rows_size, -2.0f, 2.0f, 2));
    // qkv -> rows.
    std::vector<T> qkv_ref = qkv, qkv_got = qkv, rows_ref(rows_size), rows_got(rows_size);
    CopyHeadsReference(qkv_ref.data(), rows_ref.data(), s.N, s.heads_per_row, s.first, s.count,
                       s.hs, true);
    CopyHeads(qkv_got.data(), rows_got.data(), s.N, s.heads_per_row, s.first, s.count, s.hs, true);
    EXPECT_EQ(ToFloats(rows_got), ToFloats(rows_ref)) << Name(s);
    EXPECT_EQ(ToFloats(qkv_got), ToFloats(qkv)) << Name(s) << ": the source changed";
    for (int n = 0; n < s.N; ++n) {
      for (int j = 0; j < s.count; ++j) {
        const size_t row = (size_t(n) * s.count + j) * s.hs;
        const size_t head = (size_t(n) * s.heads_per_row + s.first + j) * s.hs;
        EXPECT_EQ(Load(&rows_ref[row + s.hs - 1]), Load(&qkv[head + s.hs - 1])) << Name(s);
        EXPECT_EQ(Load(&rows_ref[row]), Load(&qkv[head])) << Name(s);
      }
    }
    // rows -> qkv: the chosen heads take the rows, every other element stays.
    std::vector<T> back_ref = qkv, back_got = qkv, rows_in = rows;
    CopyHeadsReference(back_ref.data(), rows_in.data(), s.N, s.heads_per_row, s.first, s.count,
                       s.hs, false);
    CopyHeads(back_got.data(), rows_in.data(), s.N, s.heads_per_row, s.first, s.count, s.hs, false);
    EXPECT_EQ(ToFloats(back_got), ToFloats(back_ref)) << Name(s);
    size_t changed = 0;
    for (size_t i = 0; i < qkv_size; ++i) {
      const int head = static_cast<int>((i / s.hs) % s.heads_per_row);
      const bool chosen = head >= s.first && head < s.first + s.count;
      if (!chosen) {
        ASSERT_EQ(Load(&back_ref[i]), Load(&qkv[i])) << Name(s) << " element " << i;
      } else {
        changed += Load(&back_ref[i]) != Load(&qkv[i]) ? 1 : 0;
      }
    }
    EXPECT_GT(changed, rows_size / 2) << Name(s);
    // qkv -> rows -> qkv is the identity.
    std::vector<T> round = qkv, through(rows_size);
    CopyHeads(round.data(), through.data(), s.N, s.heads_per_row, s.first, s.count, s.hs, true);
    CopyHeads(round.data(), through.data(), s.N, s.heads_per_row, s.first, s.count, s.hs, false);
    EXPECT_EQ(ToFloats(round), ToFloats(qkv)) << Name(s);
  }
}

}  // namespace
}  // namespace strata::cpu
