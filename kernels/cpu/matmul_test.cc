// Tests of kernels/cpu/matmul: the reference against hand-computed values (it is the
// specification), then the oneDNN path against the reference elementwise at sizes that do not
// divide any vector or block width, with and without bias, with null dinp/dbias, and with
// pre-filled gradient buffers (backward outputs accumulate). Inputs come from a fixed-seed RNG,
// uniform in [-1, 1].
//
// Tolerance, per element: |got - ref| <= rel * |ref| + (K + 2) * 2^-23 * mag, where
//   K   = the summation length of that output (C forward, OC for dinp, N for dweight/dbias),
//   mag = the same computation on absolute values (sum of |a_i * b_i| plus |bias| or |old|),
//         computed in fp32 with the reference.
// The second term is the standard bound for two fp32 sums in different orders (each off by at
// most ~K * 2^-24 * mag; +2 for the bias / old-value addition); it matters where terms cancel.
// The first term is the final rounding to the storage type: fp32 rel = 2^-22 (a couple of fp32
// ulps); bf16 rel = 2^-6, two bf16 ulps relative (one ulp is at most 2^-7 |x|), since fast and
// reference see the same bf16 inputs and both accumulate in fp32 but may round a value that
// lies near a rounding boundary to neighbouring bf16 numbers.
#include "kernels/cpu/matmul.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

// Random values in [-1, 1], already rounded to T (so fp32 views of them are exact).
template <typename T>
std::vector<T> Random(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(rng);
  return ToStorage<T>(values);
}

// |values| in fp32 (exact for bf16 and fp32 inputs).
template <typename T>
std::vector<float> AbsFloats(const std::vector<T>& values) {
  std::vector<float> out = ToFloats(values);
  for (float& v : out) v = std::fabs(v);
  return out;
}

template <typename T>
constexpr double RelativeTolerance() {
  return std::is_same_v<T, float> ? std::ldexp(1.0, -22) : std::ldexp(1.0, -6);
}

// Checks got against ref elementwise with the tolerance stated at the top of the file.
template <typename T>
void ExpectClose(const std::vector<T>& got, const std::vector<T>& ref,
                 const std::vector<float>& magnitude, int summation_length,
                 const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(magnitude.size(), ref.size()) << what;
  const double sum_term = (summation_length + 2) * std::ldexp(1.0, -23);
  int reported = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = Load(&got[i]), r = Load(&ref[i]);
    const double tolerance = RelativeTolerance<T>() * std::fabs(r) + sum_term * magnitude[i];
    if (!(std::fabs(g - r) <= tolerance) && reported++ < 10) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", ref " << r << ", |diff| "
                    << std::fabs(g - r) << " > tolerance " << tolerance;
    }
  }
}

struct Shape {
  int n, c, oc;
};

std::string Describe(const char* what, const Shape& shape) {
  return std::string(what) + " N=" + std::to_string(shape.n) + " C=" + std::to_string(shape.c) +
         " OC=" + std::to_string(shape.oc);
}

// Odd sizes (nothing divides 8 or 16), a single row, and one that tiles evenly.
const Shape kShapes[] = {{7, 13, 5}, {33, 65, 47}, {64, 128, 96}, {1, 31, 17}, {3, 1, 2}};

template <typename T>
class MatmulTest : public ::testing::Test {};
TYPED_TEST_SUITE(MatmulTest, StorageTypes);

// The specification on numbers small enough to check by hand (all exact in bf16).
TYPED_TEST(MatmulTest, ReferenceMatchesHandComputedValues) {
  using T = TypeParam;
  // inp [1,2] = [1 2], W [3,2] = [[3 4] [-1 0.5] [0 2]], bias = [0.5 1 -1]
  const std::vector<T> inp = ToStorage<T>({1, 2});
  const std::vector<T> weight = ToStorage<T>({3, 4, -1, 0.5f, 0, 2});
  const std::vector<T> bias = ToStorage<T>({0.5f, 1, -1});
  std::vector<T> out(3);
  MatmulForwardReference(out.data(), inp.data(), weight.data(), bias.data(), 1, 2, 3);
  EXPECT_EQ(ToFloats(out), (std::vector<float>{11.5f, 1.0f, 3.0f}));
  MatmulForwardReference<T>(out.data(), inp.data(), weight.data(), nullptr, 1, 2, 3);
  EXPECT_EQ(ToFloats(out), (std::vector<float>{11.0f, 0.0f, 4.0f}));

  // dout [1,3] = [2 -1 1]; gradient buffers pre-filled with 1 (they accumulate).
  const std::vector<T> dout = ToStorage<T>({2, -1, 1});
  std::vector<T> dinp = ToStorage<T>({1, 1});
  std::vector<T> dweight = ToStorage<T>({1, 1, 1, 1, 1, 1});
  std::vector<T> dbias = ToStorage<T>({1, 1, 1});
  MatmulBackwardReference(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), 1, 2, 3);
  // dinp = 1 + dout * W = 1 + [2*3 + (-1)*(-1) + 1*0, 2*4 + (-1)*0.5 + 1*2]
  EXPECT_EQ(ToFloats(dinp), (std::vector<float>{8.0f, 10.5f}));
  // dweight = 1 + dout^T * inp = 1 + [[2 4] [-1 -2] [1 2]]
  EXPECT_EQ(ToFloats(dweight), (std::vector<float>{3, 5, 0, -1, 2, 3}));
  EXPECT_EQ(ToFloats(dbias), (std::vector<float>{3, 0, 2}));
}

TYPED_TEST(MatmulTest, FastMatchesHandComputedValues) {
  using T = TypeParam;
  const std::vector<T> inp = ToStorage<T>({1, 2});
  const std::vector<T> weight = ToStorage<T>({3, 4, -1, 0.5f, 0, 2});
  const std::vector<T> bias = ToStorage<T>({0.5f, 1, -1});
  std::vector<T> out(3);
  MatmulForward(out.data(), inp.data(), weight.data(), bias.data(), 1, 2, 3);
  EXPECT_EQ(ToFloats(out), (std::vector<float>{11.5f, 1.0f, 3.0f}));
  const std::vector<T> dout = ToStorage<T>({2, -1, 1});
  std::vector<T> dinp = ToStorage<T>({1, 1});
  std::vector<T> dweight = ToStorage<T>({1, 1, 1, 1, 1, 1});
  std::vector<T> dbias = ToStorage<T>({1, 1, 1});
  MatmulBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                 1, 2, 3);
  EXPECT_EQ(ToFloats(dinp), (std::vector<float>{8.0f, 10.5f}));
  EXPECT_EQ(ToFloats(dweight), (std::vector<float>{3, 5, 0, -1, 2, 3}));
  EXPECT_EQ(ToFloats(dbias), (std::vector<float>{3, 0, 2}));
}

TYPED_TEST(MatmulTest, ForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937 rng(1234);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {false, true}) {
      const std::vector<T> inp = Random<T>(size_t(s.n) * s.c, rng);
      const std::vector<T> weight = Random<T>(size_t(s.oc) * s.c, rng);
      const std::vector<T> bias = Random<T>(s.oc, rng);
      const T* bias_or_null = with_bias ? bias.data() : nullptr;
      std::vector<T> got(size_t(s.n) * s.oc), ref(got.size());
      // Run the fast path twice: the second call reuses the cached primitive.
      for (int call = 0; call < 2; ++call) {
        MatmulForward(got.data(), inp.data(), weight.data(), bias_or_null, s.n, s.c, s.oc);
      }
      MatmulForwardReference(ref.data(), inp.data(), weight.data(), bias_or_null, s.n, s.c, s.oc);
      const std::vector<float> abs_inp = AbsFloats(inp), abs_weight = AbsFloats(weight),
                               abs_bias = AbsFloats(bias);
      std::vector<float> magnitude(got.size());
      MatmulForwardReference(magnitude.data(), abs_inp.data(), abs_weight.data(),
                             with_bias ? abs_bias.data() : nullptr, s.n, s.c, s.oc);
      ExpectClose(got, ref, magnitude, s.c,
                  Describe(with_bias ? "out (bias)" : "out (no bias)", s));
    }
  }
}

// Backward with every combination of optional outputs, into pre-filled buffers (random
// values, so a kernel that overwrote instead of accumulating would fail), called twice so
// the second call accumulates onto the first.
TYPED_TEST(MatmulTest, BackwardAccumulatesLikeReference) {
  using T = TypeParam;
  std::mt19937 rng(5678);
  for (const Shape& s : kShapes) {
    for (bool with_dinp : {true, false}) {
      for (bool with_dbias : {true, false}) {
        const std::vector<T> inp = Random<T>(size_t(s.n) * s.c, rng);
        const std::vector<T> weight = Random<T>(size_t(s.oc) * s.c, rng);
        const std::vector<T> dout = Random<T>(size_t(s.n) * s.oc, rng);
        const std::vector<T> dinp_before = Random<T>(size_t(s.n) * s.c, rng);
        const std::vector<T> dweight_before = Random<T>(size_t(s.oc) * s.c, rng);
        const std::vector<T> dbias_before = Random<T>(s.oc, rng);
        std::vector<T> dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
        std::vector<T> dinp_ref = dinp, dweight_ref = dweight, dbias_ref = dbias;
        for (int call = 0; call < 2; ++call) {
          MatmulBackward(with_dinp ? dinp.data() : nullptr, dweight.data(),
                         with_dbias ? dbias.data() : nullptr, dout.data(), inp.data(),
                         weight.data(), s.n, s.c, s.oc);
          MatmulBackwardReference(with_dinp ? dinp_ref.data() : nullptr, dweight_ref.data(),
                                  with_dbias ? dbias_ref.data() : nullptr, dout.data(), inp.data(),
                                  weight.data(), s.n, s.c, s.oc);
        }
        // Magnitudes: the reference on absolute values, twice, from |pre-filled|.
        const std::vector<float> abs_inp = AbsFloats(inp), abs_weight = AbsFloats(weight),
                                 abs_dout = AbsFloats(dout);
        std::vector<float> dinp_mag = AbsFloats(dinp_before),
                           dweight_mag = AbsFloats(dweight_before),
                           dbias_mag = AbsFloats(dbias_before);
        for (int call = 0; call < 2; ++call) {
          MatmulBackwardReference(dinp_mag.data(), dweight_mag.data(), dbias_mag.data(),
                                  abs_dout.data(), abs_inp.data(), abs_weight.data(), s.n, s.c,
                                  s.oc);
        }
        // Two calls: twice the summation length.
        const std::string options =
            std::string(with_dinp ? "" : ", null dinp") + (with_dbias ? "" : ", null dbias");
        ExpectClose(dweight, dweight_ref, dweight_mag, 2 * s.n,
                    Describe(("dweight" + options).c_str(), s));
        if (with_dinp) {
          ExpectClose(dinp, dinp_ref, dinp_mag, 2 * s.oc, Describe(("dinp" + options).c_str(), s));
        } else {
          EXPECT_EQ(ToFloats(dinp), ToFloats(dinp_before)) << "dinp was null but changed";
        }
        if (with_dbias) {
          ExpectClose(dbias, dbias_ref, dbias_mag, 2 * s.n,
                      Describe(("dbias" + options).c_str(), s));
        } else {
          EXPECT_EQ(ToFloats(dbias), ToFloats(dbias_before)) << "dbias was null but changed";
        }
      }
    }
  }
}

// A null dweight (a frozen weight: LoRA's base) skips the weight gradient; dinp and dbias are
// the same bits as with a dweight (the same GEMM and column sums, independent of it), for
// the fast version and the reference alike, and the fast one matches the reference.
TYPED_TEST(MatmulTest, NullDweightLeavesDinpAndDbiasUnchanged) {
  using T = TypeParam;
  std::mt19937 rng(4321);
  for (const Shape& s : kShapes) {
    const std::vector<T> inp = Random<T>(size_t(s.n) * s.c, rng);
    const std::vector<T> weight = Random<T>(size_t(s.oc) * s.c, rng);
    const std::vector<T> dout = Random<T>(size_t(s.n) * s.oc, rng);
    const std::vector<T> dinp0 = Random<T>(size_t(s.n) * s.c, rng);
    const std::vector<T> dweight0 = Random<T>(size_t(s.oc) * s.c, rng);
    const std::vector<T> dbias0 = Random<T>(s.oc, rng);
    std::vector<T> dinp = dinp0, dweight = dweight0, dbias = dbias0;
    std::vector<T> dinp_frozen = dinp0, dbias_frozen = dbias0;
    std::vector<T> dinp_ref = dinp0, dbias_ref = dbias0;
    MatmulBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                   weight.data(), s.n, s.c, s.oc);
    MatmulBackward(dinp_frozen.data(), static_cast<T*>(nullptr), dbias_frozen.data(), dout.data(),
                   inp.data(), weight.data(), s.n, s.c, s.oc);
    MatmulBackwardReference(dinp_ref.data(), static_cast<T*>(nullptr), dbias_ref.data(),
                            dout.data(), inp.data(), weight.data(), s.n, s.c, s.oc);
    EXPECT_EQ(ToFloats(dinp_frozen), ToFloats(dinp)) << Describe("dinp, null dweight", s);
    EXPECT_EQ(ToFloats(dbias_frozen), ToFloats(dbias)) << Describe("dbias, null dweight", s);
    std::vector<float> dinp_mag = AbsFloats(dinp0);
    std::vector<float> dbias_mag = AbsFloats(dbias0);
    MatmulBackwardReference(dinp_mag.data(), static_cast<float*>(nullptr), dbias_mag.data(),
                            AbsFloats(dout).data(), AbsFloats(inp).data(),
                            AbsFloats(weight).data(), s.n, s.c, s.oc);
    ExpectClose(dinp_frozen, dinp_ref, dinp_mag, s.oc, Describe("dinp vs reference", s));
    ExpectClose(dbias_frozen, dbias_ref, dbias_mag, s.n, Describe("dbias vs reference", s));
  }
}

// Several threads run the same cached primitives at once (each with its own buffers).
TYPED_TEST(MatmulTest, ConcurrentCallersShareCachedPrimitives) {
  using T = TypeParam;
  const Shape s{33, 65, 47};
  constexpr int kThreads = 4;
  std::vector<std::vector<T>> inputs, weights, outputs(kThreads), dweights(kThreads);
  std::mt19937 rng(91);
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(Random<T>(size_t(s.n) * s.c, rng));
    weights.push_back(Random<T>(size_t(s.oc) * s.c, rng));
    outputs[t].resize(size_t(s.n) * s.oc);
    dweights[t] = ToStorage<T>(std::vector<float>(size_t(s.oc) * s.c, 0.0f));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        MatmulForward<T>(outputs[t].data(), inputs[t].data(), weights[t].data(), nullptr, s.n, s.c,
                         s.oc);
      }
      // dweight += out^T * inp, once: uses out as the upstream gradient.
      MatmulBackward<T>(nullptr, dweights[t].data(), nullptr, outputs[t].data(), inputs[t].data(),
                        weights[t].data(), s.n, s.c, s.oc);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    std::vector<T> out_ref(outputs[t].size());
    MatmulForwardReference<T>(out_ref.data(), inputs[t].data(), weights[t].data(), nullptr, s.n,
                              s.c, s.oc);
    std::vector<float> magnitude(out_ref.size());
    const std::vector<float> abs_inp = AbsFloats(inputs[t]), abs_weight = AbsFloats(weights[t]);
    MatmulForwardReference<float>(magnitude.data(), abs_inp.data(), abs_weight.data(), nullptr, s.n,
                                  s.c, s.oc);
    ExpectClose(outputs[t], out_ref, magnitude, s.c, "concurrent out, thread " + std::to_string(t));
    std::vector<T> dweight_ref = ToStorage<T>(std::vector<float>(dweights[t].size(), 0.0f));
    MatmulBackwardReference<T>(nullptr, dweight_ref.data(), nullptr, outputs[t].data(),
                               inputs[t].data(), weights[t].data(), s.n, s.c, s.oc);
    std::vector<float> dweight_mag(dweight_ref.size(), 0.0f);
    const std::vector<float> abs_out = AbsFloats(outputs[t]);
    MatmulBackwardReference<float>(nullptr, dweight_mag.data(), nullptr, abs_out.data(),
                                   abs_inp.data(), abs_weight.data(), s.n, s.c, s.oc);
    ExpectClose(dweights[t], dweight_ref, dweight_mag, s.n,
                "concurrent dweight, thread " + std::to_string(t));
  }
}

// The fast path really runs oneDNN here: a fallback announces itself on stderr (and the
// reference would make the comparisons above vacuous). bf16 needs AVX-512 in oneDNN 2.6;
// without it, bf16 runs the widened path (fp32 primitives), never the reference.
TYPED_TEST(MatmulTest, FastPathDoesNotFallBackToReference) {
  using T = TypeParam;
  const bool widened = std::is_same_v<T, bf16> &&
                       !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"));
  const Shape s{5, 9, 3};  // a shape no other test uses, so its primitives are created here
  std::mt19937 rng(7);
  const std::vector<T> inp = Random<T>(size_t(s.n) * s.c, rng);
  const std::vector<T> weight = Random<T>(size_t(s.oc) * s.c, rng);
  const std::vector<T> bias = Random<T>(s.oc, rng);
  const std::vector<T> dout = Random<T>(size_t(s.n) * s.oc, rng);
  std::vector<T> out(size_t(s.n) * s.oc), dinp(inp.size()), dweight(weight.size());
  ::testing::internal::CaptureStderr();
  MatmulForward(out.data(), inp.data(), weight.data(), bias.data(), s.n, s.c, s.oc);
  MatmulForward<T>(out.data(), inp.data(), weight.data(), nullptr, s.n, s.c, s.oc);
  MatmulBackward<T>(dinp.data(), dweight.data(), nullptr, dout.data(), inp.data(), weight.data(),
                    s.n, s.c, s.oc);
  const std::string said = ::testing::internal::GetCapturedStderr();
  if (!widened) {
    EXPECT_EQ(said, "");
  } else {  // said once per process, maybe before this test: never the reference
    EXPECT_THAT(said, ::testing::Not(::testing::HasSubstr("reference")));
  }
}

// The widened bf16 path (what bf16 runs without AVX-512), on every machine, against the
// reference with the bf16 tolerance above: forward with and without bias, backward
// accumulating twice into pre-filled buffers with either output null, tiled automatically
// and in blocks that split N and OC with ragged ends.
TEST(MatmulWidened, MatchesReferenceInEveryTiling) {
  std::mt19937 rng(2468);
  for (const WidenedTiling tiling : {WidenedTiling{}, WidenedTiling{4, 5}, WidenedTiling{1, 1}}) {
    for (const Shape& s : kShapes) {
      const std::string where =
          " tiling " + std::to_string(tiling.weight_rows) + "x" + std::to_string(tiling.input_rows);
      const std::vector<bf16> inp = Random<bf16>(size_t(s.n) * s.c, rng);
      const std::vector<bf16> weight = Random<bf16>(size_t(s.oc) * s.c, rng);
      const std::vector<bf16> bias = Random<bf16>(s.oc, rng);
      const std::vector<float> abs_inp = AbsFloats(inp), abs_weight = AbsFloats(weight);
      for (bool with_bias : {false, true}) {
        const bf16* b = with_bias ? bias.data() : nullptr;
        std::vector<bf16> got(size_t(s.n) * s.oc), ref(got.size());
        MatmulForwardWidened(got.data(), inp.data(), weight.data(), b, s.n, s.c, s.oc, tiling);
        MatmulForwardReference(ref.data(), inp.data(), weight.data(), b, s.n, s.c, s.oc);
        std::vector<float> magnitude(got.size());
        const std::vector<float> abs_bias = AbsFloats(bias);
        MatmulForwardReference(magnitude.data(), abs_inp.data(), abs_weight.data(),
                               with_bias ? abs_bias.data() : nullptr, s.n, s.c, s.oc);
        ExpectClose(got, ref, magnitude, s.c, Describe("widened out", s) + where);
      }
      const std::vector<bf16> dout = Random<bf16>(size_t(s.n) * s.oc, rng);
      const std::vector<bf16> dinp0 = Random<bf16>(size_t(s.n) * s.c, rng);
      const std::vector<bf16> dweight0 = Random<bf16>(size_t(s.oc) * s.c, rng);
      for (const auto [with_dinp, with_dweight] :
           {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
        std::vector<bf16> dinp = dinp0, dweight = dweight0, dinp_ref = dinp0,
                          dweight_ref = dweight0;
        std::vector<float> dinp_mag = AbsFloats(dinp0), dweight_mag = AbsFloats(dweight0);
        for (int call = 0; call < 2; ++call) {
          MatmulBackwardWidened(with_dinp ? dinp.data() : nullptr,
                                with_dweight ? dweight.data() : nullptr, dout.data(), inp.data(),
                                weight.data(), s.n, s.c, s.oc, tiling);
          MatmulBackwardReference<bf16>(with_dinp ? dinp_ref.data() : nullptr,
                                        with_dweight ? dweight_ref.data() : nullptr, nullptr,
                                        dout.data(), inp.data(), weight.data(), s.n, s.c, s.oc);
          MatmulBackwardReference<float>(dinp_mag.data(), dweight_mag.data(), nullptr,
                                         AbsFloats(dout).data(), abs_inp.data(), abs_weight.data(),
                                         s.n, s.c, s.oc);
        }
        if (with_dinp) {
          ExpectClose(dinp, dinp_ref, dinp_mag, 2 * s.oc, Describe("widened dinp", s) + where);
        } else {
          EXPECT_EQ(ToFloats(dinp), ToFloats(dinp0)) << "dinp was null but changed" << where;
        }
        if (with_dweight) {
          ExpectClose(dweight, dweight_ref, dweight_mag, 2 * s.n,
                      Describe("widened dweight", s) + where);
        } else {
          EXPECT_EQ(ToFloats(dweight), ToFloats(dweight0))
              << "dweight was null but changed" << where;
        }
      }
    }
  }
}

TYPED_TEST(MatmulTest, EmptyShapes) {
  using T = TypeParam;
  // C = 0: every output is its bias.
  const std::vector<T> bias = ToStorage<T>({1.5f, -2.0f});
  std::vector<T> out = ToStorage<T>({9, 9, 9, 9});
  MatmulForward<T>(out.data(), nullptr, nullptr, bias.data(), 2, 0, 2);
  EXPECT_EQ(ToFloats(out), (std::vector<float>{1.5f, -2.0f, 1.5f, -2.0f}));
  // N = 0: nothing to add; gradient buffers stay as they were.
  std::vector<T> dweight = ToStorage<T>({1, 2}), dbias = ToStorage<T>({3});
  MatmulBackward<T>(nullptr, dweight.data(), dbias.data(), nullptr, nullptr, nullptr, 0, 2, 1);
  EXPECT_EQ(ToFloats(dweight), (std::vector<float>{1, 2}));
  EXPECT_EQ(ToFloats(dbias), (std::vector<float>{3}));
}

}  // namespace
}  // namespace strata::cpu
