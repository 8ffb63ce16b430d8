// Elementwise CPU kernels: fast vs reference elementwise for float and bf16 storage at sizes
// that are not multiples of the vector width, the chunk size or the thread count (the LoRA
// column-slice ops on odd row widths and slices); the GELU
// reference against finite differences and a value computed in double; accumulate
// semantics; ExpApprox against std::exp.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   float GELU fast vs reference: atol 1e-6, rtol 1e-5 (fast tanh via ExpApprox: ~1e-7 abs).
//   bf16 GELU: atol 1e-6, rtol 8e-3 (two fp32 values a few ulp apart may round to adjacent
//     bf16 values, one bf16 ulp is at most 2^-7 relative).
//   Add, Accumulate, AccumulateToFloat, casts: exact (same fp32 operations, one rounding).
//   AddScaledColumns, ScaledColumns: exact (fp32 product, then sum, no FMA on either side).
//   SumSquares fast vs reference: rtol 1e-6 (both fp64 sums, rounded to fp32 once).
//   GELU backward vs central finite differences of the fp32 forward (eps 1e-3):
//     atol 1e-3, rtol 1e-2.
//   ExpApprox vs std::exp on [-87, 88]: rtol 5e-7.
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

template <typename T>
struct GeluTolerance;
template <>
struct GeluTolerance<float> {
  static constexpr float kAtol = 1e-6f, kRtol = 1e-5f;
};
template <>
struct GeluTolerance<bf16> {
  static constexpr float kAtol = 1e-6f, kRtol = 8e-3f;
};

// Odd sizes: below one vector, a few vectors plus a tail, and several 16384-element chunks
// plus a tail so the parallel path runs on an odd thread count.
const size_t kSizes[] = {1, 13, 67, 3 * 16384 + 37};

template <typename T>
class ElementwiseTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(ElementwiseTest, StorageTypes);

TYPED_TEST(ElementwiseTest, GeluForwardMatchesReference) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    // Includes large magnitudes, where tanh saturates, beyond the usual [-6, 6].
    std::vector<float> values = RandomFloats(n, -6.0f, 6.0f, 1);
    if (n > 13) values[3] = 40.0f, values[7] = -40.0f, values[11] = 1e-6f;
    const std::vector<T> inp = ToStorage<T>(values);
    std::vector<T> ref(n), got(n);
    GeluForwardReference(ref.data(), inp.data(), n);
    GeluForward(got.data(), inp.data(), n);
    ExpectAllClose(ToFloats(got), ToFloats(ref), GeluTolerance<T>::kAtol, GeluTolerance<T>::kRtol,
                   "gelu n=" + std::to_string(n));
  }
}

TYPED_TEST(ElementwiseTest, GeluBackwardMatchesReferenceAndAccumulates) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    std::vector<float> values = RandomFloats(n, -6.0f, 6.0f, 2);
    if (n > 13) values[3] = 40.0f, values[7] = -40.0f;
    const std::vector<T> inp = ToStorage<T>(values);
    const std::vector<T> dout = ToStorage<T>(RandomFloats(n, -1.0f, 1.0f, 3));
    // Prefilled gradients: the kernels must add to them.
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(n, -1.0f, 1.0f, 4));
    std::vector<T> ref = prefill, got = prefill;
    GeluBackwardReference(ref.data(), inp.data(), dout.data(), n);
    GeluBackward(got.data(), inp.data(), dout.data(), n);
    ExpectAllClose(ToFloats(got), ToFloats(ref), GeluTolerance<T>::kAtol, GeluTolerance<T>::kRtol,
                   "gelu backward n=" + std::to_string(n));
  }
}

TEST(GeluReference, ForwardMatchesFormulaInDouble) {
  const std::vector<float> inp = {-3.0f, -1.0f, -0.1f, 0.0f, 0.5f, 1.0f, 2.5f};
  std::vector<float> out(inp.size());
  GeluForwardReference(out.data(), inp.data(), inp.size());
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    const double expected =
        0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out[i], expected, 1e-6 + 1e-6 * std::fabs(expected)) << "x=" << x;
  }
}

TEST(GeluReference, BackwardMatchesFiniteDifferences) {
  const size_t n = 67;
  const std::vector<float> inp = RandomFloats(n, -4.0f, 4.0f, 5);
  const std::vector<float> dout(n, 1.0f);
  std::vector<float> dinp(n, 0.0f);
  GeluBackwardReference(dinp.data(), inp.data(), dout.data(), n);
  const float eps = 1e-3f;
  std::vector<float> numeric(n);
  for (size_t i = 0; i < n; ++i) {
    float plus_x = inp[i] + eps, minus_x = inp[i] - eps, plus, minus;
    GeluForwardReference(&plus, &plus_x, 1);
    GeluForwardReference(&minus, &minus_x, 1);
    numeric[i] = (plus - minus) / (plus_x - minus_x);
  }
  ExpectAllClose(dinp, numeric, 1e-3f, 1e-2f, "gelu finite differences");
}

TYPED_TEST(ElementwiseTest, AddMatchesReferenceAndMayAlias) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    const std::vector<T> a = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 6));
    const std::vector<T> b = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 7));
    std::vector<T> ref(n), got(n);
    AddReference(ref.data(), a.data(), b.data(), n);
    Add(got.data(), a.data(), b.data(), n);
    ExpectAllClose(ToFloats(got), ToFloats(ref), 0.0f, 0.0f, "add");
    std::vector<T> in_place = a;  // out aliases a
    Add(in_place.data(), in_place.data(), b.data(), n);
    ExpectAllClose(ToFloats(in_place), ToFloats(ref), 0.0f, 0.0f, "add in place");
    for (size_t i = 0; i < std::min<size_t>(n, 5); ++i) {
      EXPECT_EQ(Load(&ref[i]), Load(&ToStorage<T>({Load(&a[i]) + Load(&b[i])})[0]));
    }
  }
}

TYPED_TEST(ElementwiseTest, AccumulateAddsToDestination) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    const std::vector<T> src = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 8));
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 9));
    std::vector<T> ref = prefill, got = prefill;
    AccumulateReference(ref.data(), src.data(), n);
    Accumulate(got.data(), src.data(), n);
    ExpectAllClose(ToFloats(got), ToFloats(ref), 0.0f, 0.0f, "accumulate");
    // Independent of the reference: one fp32 add of the two stored values, one rounding.
    for (size_t i = 0; i < n; ++i) {
      T expected;
      Store(&expected, Load(&prefill[i]) + Load(&src[i]));
      ASSERT_EQ(Load(&got[i]), Load(&expected)) << i;
    }
  }
}

// LoRA column slices [col, col + n) of N rows of `cols`: the odd shape of the op's
// documentation, a slice from column 0 to the row's end, one ending at the row's end, a single
// column, and one of more than a chunk's worth of elements (the parallel path).
struct ColumnSlice {
  int N, cols, col, n;
};
const ColumnSlice kSlices[] = {
    {5, 13, 4, 7}, {3, 9, 0, 9}, {1, 17, 10, 7}, {4, 11, 5, 1}, {67, 1031, 300, 517}};
constexpr float kLoraAlpha = 0.75f;

std::string Describe(const ColumnSlice& slice) {
  return "N=" + std::to_string(slice.N) + " cols=" + std::to_string(slice.cols) +
         " col=" + std::to_string(slice.col) + " n=" + std::to_string(slice.n);
}

TYPED_TEST(ElementwiseTest, AddScaledColumnsUpdatesOnlyTheSlice) {
  using T = TypeParam;
  for (const ColumnSlice& c : kSlices) {
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(size_t(c.N) * c.cols, -2, 2, 40));
    const std::vector<T> src = ToStorage<T>(RandomFloats(size_t(c.N) * c.n, -2, 2, 41));
    std::vector<T> ref = prefill, got = prefill;
    AddScaledColumnsReference(ref.data(), c.cols, c.col, src.data(), c.N, c.n, kLoraAlpha);
    AddScaledColumns(got.data(), c.cols, c.col, src.data(), c.N, c.n, kLoraAlpha);
    ExpectAllClose(ToFloats(got), ToFloats(ref), 0.0f, 0.0f, "add scaled columns " + Describe(c));
    // Independent of the reference: inside the slice one fp32 product and add of the stored
    // values, one rounding; outside it the prefill, untouched.
    for (int i = 0; i < c.N; ++i) {
      for (int k = 0; k < c.cols; ++k) {
        const size_t at = size_t(i) * c.cols + k;
        float expected = Load(&prefill[at]);
        if (k >= c.col && k < c.col + c.n) {
          T rounded;
          Store(&rounded, expected + kLoraAlpha * Load(&src[size_t(i) * c.n + (k - c.col)]));
          expected = Load(&rounded);
        }
        ASSERT_EQ(Load(&got[at]), expected) << Describe(c) << " row " << i << " column " << k;
      }
    }
  }
}

TYPED_TEST(ElementwiseTest, ScaledColumnsOverwritesWithTheScaledSlice) {
  using T = TypeParam;
  for (const ColumnSlice& c : kSlices) {
    const std::vector<T> src = ToStorage<T>(RandomFloats(size_t(c.N) * c.cols, -2, 2, 42));
    // Prefilled: the op overwrites (it is not accumulating).
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(size_t(c.N) * c.n, -2, 2, 43));
    std::vector<T> ref = prefill, got = prefill;
    ScaledColumnsReference(ref.data(), src.data(), c.cols, c.col, c.N, c.n, kLoraAlpha);
    ScaledColumns(got.data(), src.data(), c.cols, c.col, c.N, c.n, kLoraAlpha);
    ExpectAllClose(ToFloats(got), ToFloats(ref), 0.0f, 0.0f, "scaled columns " + Describe(c));
    for (int i = 0; i < c.N; ++i) {
      for (int j = 0; j < c.n; ++j) {
        T expected;
        Store(&expected, kLoraAlpha * Load(&src[size_t(i) * c.cols + c.col + j]));
        ASSERT_EQ(Load(&got[size_t(i) * c.n + j]), Load(&expected))
            << Describe(c) << " row " << i << " column " << j;
      }
    }
  }
}

TYPED_TEST(ElementwiseTest, AccumulateToFloatAddsToFloatDestination) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    const std::vector<T> src = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 10));
    const std::vector<float> prefill = RandomFloats(n, -2.0f, 2.0f, 11);
    std::vector<float> ref = prefill, got = prefill;
    AccumulateToFloatReference(ref.data(), src.data(), n);
    AccumulateToFloat(got.data(), src.data(), n);
    ExpectAllClose(got, ref, 0.0f, 0.0f, "accumulate to float");
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], prefill[i] + Load(&src[i])) << i;
  }
}

TYPED_TEST(ElementwiseTest, CastsRoundTrip) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    const std::vector<float> src = RandomFloats(n, -100.0f, 100.0f, 12);
    std::vector<T> ref(n), got(n);
    CastFromFloatReference(ref.data(), src.data(), n);
    CastFromFloat(got.data(), src.data(), n);
    for (size_t i = 0; i < n; ++i) {
      T expected;
      Store(&expected, src[i]);  // strata::Store is the rounding rule (nearest even)
      ASSERT_EQ(Load(&got[i]), Load(&expected)) << i;
      ASSERT_EQ(Load(&ref[i]), Load(&expected)) << i;
    }
    std::vector<float> back_ref(n), back_got(n);
    CastToFloatReference(back_ref.data(), got.data(), n);
    CastToFloat(back_got.data(), got.data(), n);
    ExpectAllClose(back_got, back_ref, 0.0f, 0.0f, "cast to float");
    ExpectAllClose(back_got, src, 0.0f, std::is_same<T, float>::value ? 0.0f : 1.0f / 256,
                   "cast round trip");
  }
}

TEST(SumSquares, MatchesReferenceAndDouble) {
  omp_set_num_threads(3);
  for (size_t n : kSizes) {
    const std::vector<float> x = RandomFloats(n, -3.0f, 3.0f, 13);
    float ref = -1.0f, got = -1.0f;
    SumSquaresReference(&ref, x.data(), n);
    SumSquares(&got, x.data(), n);
    double expected = 0.0;
    for (float value : x) expected += static_cast<double>(value) * value;
    EXPECT_NEAR(ref, expected, 1e-6 * expected) << n;
    EXPECT_NEAR(got, ref, 1e-6 * ref) << n;
  }
  float empty = -1.0f;
  SumSquares(&empty, nullptr, 0);
  EXPECT_EQ(empty, 0.0f);
}

TEST(SumSquares, DoesNotDependOnThreadCount) {
  const std::vector<float> x = RandomFloats(5 * 16384 + 3, -3.0f, 3.0f, 14);
  float one = 0.0f, three = 0.0f;
  omp_set_num_threads(1);
  SumSquares(&one, x.data(), x.size());
  omp_set_num_threads(3);
  SumSquares(&three, x.data(), x.size());
  EXPECT_EQ(one, three);
}

TEST(ExpApprox, MatchesStdExp) {
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double expected = std::exp(static_cast<double>(x));
    EXPECT_NEAR(ExpApprox(x), expected, 5e-7 * expected) << "x=" << x;
  }
  EXPECT_EQ(ExpApprox(0.0f), 1.0f);
  EXPECT_EQ(ExpApprox(-100.0f), 0.0f);
  EXPECT_EQ(ExpApprox(-INFINITY), 0.0f);
  EXPECT_GT(ExpApprox(1000.0f), 1e38f);
  EXPECT_TRUE(std::isnan(ExpApprox(NAN)));
}

}  // namespace
}  // namespace strata::cpu
