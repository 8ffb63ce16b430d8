// Encoder CPU kernels: fast vs reference for float and bf16 at odd B, T, C on an odd thread
// count, with repeated tokens (a scatter-add with collisions) and prefilled gradients; the
// reference against sums computed in double; rows of tokens that do not occur untouched.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   fast vs reference: exact (same fp32 additions in the same order, one rounding).
//   reference vs double sums: float atol 1e-6, rtol 1e-6; bf16 atol 1e-6, rtol 8e-3 (the
//     fp32 sum may round to the adjacent bf16 value; one bf16 ulp is at most 2^-7 relative).
#include "kernels/cpu/encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

struct Shape {
  int B, T, C, V;
};
// V small against B*T so that tokens repeat; V larger than B*T so that some rows are unused.
const Shape kShapes[] = {{1, 1, 13, 5}, {3, 7, 13, 5}, {2, 33, 67, 11}, {3, 7, 67, 50}};

std::string Name(const char* what, const Shape& s) {
  return std::string(what) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " C=" + std::to_string(s.C);
}

template <typename S>
class EncoderTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(EncoderTest, StorageTypes);

TYPED_TEST(EncoderTest, ForwardMatchesReference) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, V = shape.V;
    const std::vector<int32_t> tokens = RandomTokens(size_t(B) * T, V, 1);
    const std::vector<S> wte = ToStorage<S>(RandomFloats(size_t(V) * C, -1.0f, 1.0f, 2));
    const std::vector<S> wpe = ToStorage<S>(RandomFloats(size_t(T + 3) * C, -1.0f, 1.0f, 3));
    std::vector<S> ref(size_t(B) * T * C), got(size_t(B) * T * C);
    EncoderForwardReference(ref.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    EncoderForward(got.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    ExpectAllClose(ToFloats(got), ToFloats(ref), 0.0f, 0.0f, Name("out", shape));
    // The definition, for the first position of each batch row.
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < C; ++i) {
        S expected;
        Store(&expected, Load(&wte[size_t(tokens[b * T]) * C + i]) + Load(&wpe[i]));
        ASSERT_EQ(Load(&ref[size_t(b) * T * C + i]), Load(&expected));
      }
    }
  }
}

TYPED_TEST(EncoderTest, BackwardMatchesReferenceAndAccumulates) {
  using S = TypeParam;
  for (const Shape& shape : kShapes) {
    const int B = shape.B, T = shape.T, C = shape.C, V = shape.V;
    const std::vector<int32_t> tokens = RandomTokens(size_t(B) * T, V, 4);
    const std::vector<S> dout = ToStorage<S>(RandomFloats(size_t(B) * T * C, -1.0f, 1.0f, 5));
    // Prefilled gradients: both versions must add to them.
    const std::vector<S> dwte0 = ToStorage<S>(RandomFloats(size_t(V) * C, -1.0f, 1.0f, 6));
    const std::vector<S> dwpe0 = ToStorage<S>(RandomFloats(size_t(T) * C, -1.0f, 1.0f, 7));
    std::vector<S> dwte_ref = dwte0, dwpe_ref = dwpe0, dwte_got = dwte0, dwpe_got = dwpe0;
    EncoderBackwardReference(dwte_ref.data(), dwpe_ref.data(), dout.data(), tokens.data(), B, T, C);
    EncoderBackward(dwte_got.data(), dwpe_got.data(), dout.data(), tokens.data(), B, T, C);
    ExpectAllClose(ToFloats(dwte_got), ToFloats(dwte_ref), 0.0f, 0.0f, Name("dwte", shape));
    ExpectAllClose(ToFloats(dwpe_got), ToFloats(dwpe_ref), 0.0f, 0.0f, Name("dwpe", shape));

    // Independent check: prefill + the sum of contributions, in double.
    std::vector<double> dwte_sum(size_t(V) * C), dwpe_sum(size_t(T) * C);
    for (size_t i = 0; i < dwte_sum.size(); ++i) dwte_sum[i] = Load(&dwte0[i]);
    for (size_t i = 0; i < dwpe_sum.size(); ++i) dwpe_sum[i] = Load(&dwpe0[i]);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < C; ++i) {
          const double d = Load(&dout[(size_t(b) * T + t) * C + i]);
          dwte_sum[size_t(tokens[b * T + t]) * C + i] += d;
          dwpe_sum[size_t(t) * C + i] += d;
        }
      }
    }
    const float rtol = std::is_same<S, float>::value ? 1e-6f : 8e-3f;
    ExpectAllClose(ToFloats(dwte_ref), std::vector<float>(dwte_sum.begin(), dwte_sum.end()), 1e-6f,
                   rtol, Name("dwte vs double", shape));
    ExpectAllClose(ToFloats(dwpe_ref), std::vector<float>(dwpe_sum.begin(), dwpe_sum.end()), 1e-6f,
                   rtol, Name("dwpe vs double", shape));
    // Rows of tokens that do not occur keep their exact bits.
    for (int v = 0; v < V; ++v) {
      if (std::find(tokens.begin(), tokens.end(), v) != tokens.end()) continue;
      for (int i = 0; i < C; ++i) {
        const size_t index = size_t(v) * C + i;
        ASSERT_EQ(std::memcmp(&dwte_got[index], &dwte0[index], sizeof(S)), 0) << v;
      }
    }
  }
}

// No position embedding (LLaMA): out is the token rows; the backward adds to dwte only.
TYPED_TEST(EncoderTest, WithoutPositionEmbedding) {
  using S = TypeParam;
  const int B = 2, T = 5, C = 19, V = 7;
  const std::vector<int32_t> tokens = RandomTokens(size_t(B) * T, V, 8);
  const std::vector<S> wte = ToStorage<S>(RandomFloats(size_t(V) * C, -1.0f, 1.0f, 9));
  std::vector<S> ref(size_t(B) * T * C), got(ref.size());
  EncoderForwardReference(ref.data(), tokens.data(), wte.data(), static_cast<const S*>(nullptr),
                          B, T, C);
  EncoderForward(got.data(), tokens.data(), wte.data(), static_cast<const S*>(nullptr), B, T, C);
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    for (int i = 0; i < C; ++i) {
      ASSERT_EQ(Load(&ref[r * C + i]), Load(&wte[size_t(tokens[r]) * C + i]));
      ASSERT_EQ(Load(&got[r * C + i]), Load(&wte[size_t(tokens[r]) * C + i]));
    }
  }
  const std::vector<S> dout = ToStorage<S>(RandomFloats(ref.size(), -1.0f, 1.0f, 10));
  std::vector<S> dwte_ref(size_t(V) * C), dwte_got(dwte_ref.size());
  std::vector<S> dwte_with(dwte_ref.size()), dwpe(size_t(T) * C);
  EncoderBackwardReference(dwte_ref.data(), static_cast<S*>(nullptr), dout.data(), tokens.data(),
                           B, T, C);
  EncoderBackward(dwte_got.data(), static_cast<S*>(nullptr), dout.data(), tokens.data(), B, T, C);
  EncoderBackward(dwte_with.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  ExpectAllClose(ToFloats(dwte_ref), ToFloats(dwte_with), 0.0f, 0.0f, "dwte (reference)");
  ExpectAllClose(ToFloats(dwte_got), ToFloats(dwte_with), 0.0f, 0.0f, "dwte (fast)");
}

}  // namespace
}  // namespace strata::cpu
