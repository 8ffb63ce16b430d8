// Elementwise CPU kernels: fast vs reference elementwise for float and bf16 storage at sizes
// that are not multiples of the vector width, the chunk size or the thread count (the LoRA
// column-slice ops on odd row widths and slices; LoRA dropout on odd shapes and
// probabilities, its mask's statistics, its independence of how rows are split over calls
// and its dependence on the key); the GELU
// reference against finite differences and a value computed in double; accumulate
// semantics; ExpApprox against std::exp.
//
// Tolerances, |got - ref| <= atol + rtol * |ref| elementwise:
//   float GELU fast vs reference: atol 1e-6, rtol 1e-5 (fast tanh via ExpApprox: ~1e-7 abs).
//   bf16 GELU: atol 1e-6, rtol 8e-3 (two fp32 values a few ulp apart may round to adjacent
//     bf16 values, one bf16 ulp is at most 2^-7 relative).
//   Add, Accumulate, AccumulateToFloat, casts: exact (same fp32 operations, one rounding).
//   AddScaledColumns, ScaledColumns: exact (fp32 product, then sum, no FMA on either side).
//   Dropout: exact (fp32 quotient, then sum, one rounding); its mask's statistics within 5
//     binomial standard deviations (stated at each test).
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
#include "kernels/dropout_mask.h"

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

// Dropout shapes: N rows of C channels, T_len positions per sample row, the first row being
// global sample row row0. Odd sizes with a partial last sample row, one position per sample
// row, a single channel, and more than a chunk's worth of elements (the parallel path) far
// from row 0.
struct DropoutShape {
  int N, C, T_len;
  int64_t row0;
};
const DropoutShape kDropoutShapes[] = {
    {5, 13, 3, 0}, {14, 7, 7, 3}, {9, 1, 1, 11}, {4, 29, 1, 0}, {67, 517, 5, 1000003}};
const float kDropProbabilities[] = {0.0f, 0.1f, 0.5f, 0.875f};
constexpr uint64_t kDropoutKey = 0x5eed0f10aull;

std::string Describe(const DropoutShape& shape, float p, bool accumulate) {
  return "N=" + std::to_string(shape.N) + " C=" + std::to_string(shape.C) +
         " T=" + std::to_string(shape.T_len) + " row0=" + std::to_string(shape.row0) +
         " p=" + std::to_string(p) + (accumulate ? " accumulate" : " overwrite");
}

// n values with |x| in [0.25, 2) and random signs: never 0, so an output of 0 (without
// accumulation) marks a dropped element.
std::vector<float> NonZeroFloats(size_t n, uint32_t seed) {
  std::vector<float> values = RandomFloats(n, 0.25f, 2.0f, seed);
  const std::vector<float> signs = RandomFloats(n, -1.0f, 1.0f, seed + 1);
  for (size_t i = 0; i < n; ++i) values[i] = signs[i] < 0.0f ? -values[i] : values[i];
  return values;
}

// The mask the fast Dropout drew over N rows of C channels (true: kept), from its output
// without accumulation of NonZeroFloats.
template <typename T>
std::vector<bool> DrawnMask(int N, int C, int T_len, int64_t row0, float p, uint64_t key) {
  const std::vector<T> in = ToStorage<T>(NonZeroFloats(size_t(N) * C, 50));
  std::vector<T> out(in.size());
  Dropout(out.data(), in.data(), N, C, T_len, row0, p, key, /*accumulate=*/false);
  std::vector<bool> kept(out.size());
  for (size_t at = 0; at < out.size(); ++at) kept[at] = Load(&out[at]) != 0.0f;
  return kept;
}

TYPED_TEST(ElementwiseTest, DropoutMatchesReferenceAndItsDefinition) {
  using T = TypeParam;
  for (const DropoutShape& d : kDropoutShapes) {
    const size_t n = size_t(d.N) * d.C;
    const std::vector<T> in = ToStorage<T>(NonZeroFloats(n, 44));
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 46));
    for (float p : kDropProbabilities) {
      for (bool accumulate : {false, true}) {
        const std::string what = Describe(d, p, accumulate);
        std::vector<T> ref = prefill, got = prefill;
        DropoutReference(ref.data(), in.data(), d.N, d.C, d.T_len, d.row0, p, kDropoutKey,
                         accumulate);
        Dropout(got.data(), in.data(), d.N, d.C, d.T_len, d.row0, p, kDropoutKey, accumulate);
        ExpectAllClose(ToFloats(got), ToFloats(ref), 0.0f, 0.0f, "dropout " + what);
        // Independent of the reference's loops: the mask of dropout_mask.h at (global row,
        // position, channel); a kept element is the fp32 quotient in / (1 - p) (plus the
        // prefill when accumulating) rounded once, a dropped one 0 (or the prefill, exactly).
        for (int i = 0; i < d.N; ++i) {
          for (int c = 0; c < d.C; ++c) {
            const size_t at = size_t(i) * d.C + c;
            const bool keep = DropoutKeep(kDropoutKey, d.row0 + i / d.T_len, i % d.T_len, c, p);
            const float value = keep ? Load(&in[at]) / (1.0f - p) : 0.0f;
            T expected;
            Store(&expected, accumulate ? Load(&prefill[at]) + value : value);
            ASSERT_EQ(Load(&got[at]), Load(&expected)) << what << " row " << i << " channel " << c;
          }
        }
      }
    }
  }
}

TYPED_TEST(ElementwiseTest, DropoutWithoutProbabilityCopiesOrAdds) {
  using T = TypeParam;
  const DropoutShape d = kDropoutShapes[4];
  const size_t n = size_t(d.N) * d.C;
  const std::vector<T> in = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 47));
  const std::vector<T> prefill = ToStorage<T>(RandomFloats(n, -2.0f, 2.0f, 48));
  std::vector<T> copied = prefill, added = prefill;
  Dropout(copied.data(), in.data(), d.N, d.C, d.T_len, d.row0, 0.0f, kDropoutKey, false);
  Dropout(added.data(), in.data(), d.N, d.C, d.T_len, d.row0, 0.0f, kDropoutKey, true);
  for (size_t at = 0; at < n; ++at) {
    ASSERT_EQ(Load(&copied[at]), Load(&in[at])) << at;
    T sum;
    Store(&sum, Load(&prefill[at]) + Load(&in[at]));
    ASSERT_EQ(Load(&added[at]), Load(&sum)) << at;
  }
}

TYPED_TEST(ElementwiseTest, DropoutInPlaceMatchesOutOfPlace) {
  using T = TypeParam;
  const DropoutShape d = kDropoutShapes[4];
  const std::vector<T> in = ToStorage<T>(RandomFloats(size_t(d.N) * d.C, -2.0f, 2.0f, 49));
  for (bool accumulate : {false, true}) {
    std::vector<T> out_of_place = in, in_place = in;
    Dropout(out_of_place.data(), in.data(), d.N, d.C, d.T_len, d.row0, 0.3f, kDropoutKey,
            accumulate);
    Dropout(in_place.data(), in_place.data(), d.N, d.C, d.T_len, d.row0, 0.3f, kDropoutKey,
            accumulate);
    ExpectAllClose(ToFloats(in_place), ToFloats(out_of_place), 0.0f, 0.0f,
                   accumulate ? "in place, accumulating" : "in place");
  }
}

// 250 rows of 400 channels (10 sample rows of 25 positions): 1e5 Bernoulli(p) draws if the
// mask is what it claims. The dropped fraction of the whole is within 5 standard deviations
// sqrt(p (1 - p) / 1e5) of p (0.0068 for p = 0.25), and of every row (400 draws) within 5 of
// its own (0.108): a mask that ignored the channel would drop whole rows. No two rows and no
// two channels draw the same mask: one that ignored the sample row, the position or the
// channel would repeat rows (or channels).
TYPED_TEST(ElementwiseTest, DropoutDropsAFractionPIndependently) {
  using T = TypeParam;
  const int N = 250, C = 400, T_len = 25;
  for (float p : {0.25f, 0.5f, 0.8f}) {
    const std::vector<bool> kept = DrawnMask<T>(N, C, T_len, 40, p, kDropoutKey);
    const double n = double(N) * C;
    size_t dropped = 0;
    for (bool keep : kept) dropped += keep ? 0 : 1;
    const double sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_LT(std::fabs(dropped / n - p), 5 * sigma) << "p=" << p << " dropped " << dropped;
    const double row_sigma = std::sqrt(p * (1.0 - p) / C);
    for (int i = 0; i < N; ++i) {
      size_t row_dropped = 0;
      for (int c = 0; c < C; ++c) row_dropped += kept[size_t(i) * C + c] ? 0 : 1;
      ASSERT_LT(std::fabs(double(row_dropped) / C - p), 5 * row_sigma) << "p=" << p << " row " << i;
    }
    std::vector<std::vector<bool>> rows(N), channels(C, std::vector<bool>(N));
    for (int i = 0; i < N; ++i) {
      rows[i].assign(kept.begin() + size_t(i) * C, kept.begin() + size_t(i + 1) * C);
      for (int c = 0; c < C; ++c) channels[c][i] = kept[size_t(i) * C + c];
    }
    std::sort(rows.begin(), rows.end());
    std::sort(channels.begin(), channels.end());
    EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end()) << "p=" << p;
    EXPECT_EQ(std::adjacent_find(channels.begin(), channels.end()), channels.end()) << "p=" << p;
  }
}

TYPED_TEST(ElementwiseTest, DropoutKeptElementsAreTheQuotient) {
  using T = TypeParam;
  const int N = 250, C = 400, T_len = 25;
  const float p = 0.25f;
  const std::vector<T> in = ToStorage<T>(NonZeroFloats(size_t(N) * C, 51));
  std::vector<T> out(in.size());
  Dropout(out.data(), in.data(), N, C, T_len, 0, p, kDropoutKey, false);
  for (size_t at = 0; at < out.size(); ++at) {
    if (Load(&out[at]) == 0.0f) continue;  // dropped (NonZeroFloats are never 0)
    T expected;
    Store(&expected, Load(&in[at]) / 0.75f);
    ASSERT_EQ(Load(&out[at]), Load(&expected)) << at;
  }
}

// Two sample rows of T positions as one call (row0 = 0, N = 2T) and as two (row0 = 0 and
// row0 = 1, N = T each), as two micro-batches or two ranks hold them: the same bits. And a
// rank holding sample rows 3..4 of 5 draws the tail of the whole call.
TYPED_TEST(ElementwiseTest, DropoutSplitOverCallsDrawsTheSameMask) {
  using T = TypeParam;
  const int T_len = 7, C = 13;
  const float p = 0.5f;
  const std::vector<T> in = ToStorage<T>(NonZeroFloats(size_t(5) * T_len * C, 52));
  const size_t sample = size_t(T_len) * C;
  for (bool accumulate : {false, true}) {
    const std::vector<T> prefill = ToStorage<T>(RandomFloats(in.size(), -2.0f, 2.0f, 53));
    std::vector<T> whole = prefill, split = prefill;
    Dropout(whole.data(), in.data(), 5 * T_len, C, T_len, 0, p, kDropoutKey, accumulate);
    Dropout(split.data(), in.data(), T_len, C, T_len, 0, p, kDropoutKey, accumulate);
    Dropout(split.data() + sample, in.data() + sample, T_len, C, T_len, 1, p, kDropoutKey,
            accumulate);
    DropoutReference(split.data() + 2 * sample, in.data() + 2 * sample, T_len, C, T_len, 2, p,
                     kDropoutKey, accumulate);
    Dropout(split.data() + 3 * sample, in.data() + 3 * sample, 2 * T_len, C, T_len, 3, p,
            kDropoutKey, accumulate);
    ExpectAllClose(ToFloats(split), ToFloats(whole), 0.0f, 0.0f,
                   accumulate ? "split calls, accumulating" : "split calls");
  }
  // The sample row counts, not where the rows sit in the call: sample row 1 alone at
  // row0 = 0 draws sample row 0's mask, not its own.
  std::vector<T> first(sample), shifted(sample);
  Dropout(first.data(), in.data(), T_len, C, T_len, 0, p, kDropoutKey, false);
  Dropout(shifted.data(), in.data(), T_len, C, T_len, 1, p, kDropoutKey, false);
  size_t differ = 0;
  for (size_t at = 0; at < sample; ++at) {
    differ += (Load(&first[at]) == 0.0f) != (Load(&shifted[at]) == 0.0f) ? 1 : 0;
  }
  EXPECT_GT(differ, 0u) << "row0 did not change the mask";
}

// Another key: an independent mask, so the two disagree on a fraction 2 p (1 - p) of the
// elements (0.375 for p = 0.25), within 5 standard deviations over 1e5 elements (0.0077).
TYPED_TEST(ElementwiseTest, DropoutWithAnotherKeyDrawsAnotherMask) {
  using T = TypeParam;
  const int N = 250, C = 400, T_len = 25;
  const float p = 0.25f;
  const std::vector<bool> one = DrawnMask<T>(N, C, T_len, 0, p, kDropoutKey);
  const std::vector<bool> other = DrawnMask<T>(N, C, T_len, 0, p, kDropoutKey + 1);
  const std::vector<bool> same = DrawnMask<T>(N, C, T_len, 0, p, kDropoutKey);
  EXPECT_EQ(one, same) << "the same key must draw the same mask";
  size_t differ = 0;
  for (size_t at = 0; at < one.size(); ++at) differ += one[at] != other[at] ? 1 : 0;
  const double n = double(N) * C, expected = 2 * p * (1 - p);
  EXPECT_LT(std::fabs(differ / n - expected), 5 * std::sqrt(expected * (1 - expected) / n))
      << differ << " of " << n << " elements differ";
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
