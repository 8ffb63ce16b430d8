// Tests of the CPU Adam (cpu_adam.h) and its bandwidth reference (cpu_adam_bandwidth.h).
// Tolerance: none. Every SIMD path must reproduce CpuAdamReference BIT FOR BIT (master, m, v
// and the fp32 or bf16 param copy) after several steps, at sizes that are not multiples of
// the vector width (8, 16, 32) or of the thread count, with unaligned arrays, weight decay on
// and off, grad_scale != 1, and values from denormal to huge, zero, -0, infinite and NaN.
// The only relaxation: NaN compares equal to any NaN (payloads depend on which operand the
// compiler puts first, which the formula does not fix). Paths this CPU lacks are skipped
// with a message.
#include "kernels/cpu/cpu_adam.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/testing/status_matchers.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cpu_adam_bandwidth.h"

namespace strata::cpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

// Matches a CpuAdam that runs `path`.
::testing::Matcher<const CpuAdam&> TakesPath(CpuAdamPath path) {
  return ::testing::Property(&CpuAdam::path, path);
}

constexpr CpuAdamPath kAllPaths[] = {CpuAdamPath::kReference, CpuAdamPath::kAvx2,
                                     CpuAdamPath::kAvx512};

uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

bool SameFloat(float a, float b) { return Bits(a) == Bits(b) || (std::isnan(a) && std::isnan(b)); }

bool SameBf16(bf16 a, bf16 b) {
  return a.bits == b.bits || (std::isnan(ToFloat(a)) && std::isnan(ToFloat(b)));
}

// Optimizer state of n elements, stored at `offset` floats past a 64-byte boundary so that
// tests also cover unaligned arrays.
struct State {
  State(size_t n, size_t offset)
      : n(n),
        offset(offset),
        master_store(n + 16),
        grad_store(n + 16),
        m_store(n + 16),
        v_store(n + 16),
        param_f32_store(n + 16),
        param_bf16_store(n + 32) {}
  float* master() { return master_store.data() + offset; }
  float* grad() { return grad_store.data() + offset; }
  float* m() { return m_store.data() + offset; }
  float* v() { return v_store.data() + offset; }
  float* param_f32() { return param_f32_store.data() + offset; }
  bf16* param_bf16() { return param_bf16_store.data() + offset; }

  size_t n, offset;
  std::vector<float> master_store, grad_store, m_store, v_store, param_f32_store;
  std::vector<bf16> param_bf16_store;
};

// Typical training magnitudes: weights ~0.02-1, gradients ~1e-6-1e-1 of both signs, m of the
// gradients' size, v their square; a few exact zeros.
void FillTypical(State& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_magnitude(-6.0f, -1.0f);
  for (size_t i = 0; i < s.n; ++i) {
    const float g = normal(rng) * std::pow(10.0f, log_magnitude(rng));
    s.master()[i] = normal(rng) * 0.05f;
    s.grad()[i] = (i % 97 == 5) ? 0.0f : g;
    s.m()[i] = (i % 89 == 3) ? 0.0f : 0.5f * g;
    s.v()[i] = (i % 89 == 3) ? 0.0f : 0.8f * g * g;
    s.param_f32()[i] = -1.0f;
    s.param_bf16()[i] = bf16{0xdead};
  }
}

// Bit patterns from the whole fp32 range (denormals, tiny, huge), signed zeros, infinities
// and NaNs in every array; v stays non-negative as it is in training (negative v gives NaN,
// which is also covered by the NaN lanes).
void FillExtreme(State& s, uint32_t seed) {
  std::mt19937 rng(seed);
  const float specials[] = {0.0f,
                            -0.0f,
                            FromBits(0x00000001),
                            FromBits(0x807fffff),
                            FromBits(0x00400000),
                            1e-30f,
                            -1e-20f,
                            0x1p-64f,
                            0x1p-65f,
                            0x1p64f,
                            -0x1.fffffep63f,
                            1e30f,
                            3e38f,
                            INFINITY,
                            -INFINITY,
                            NAN,
                            FromBits(0x7f800001),
                            FromBits(0xffc01234)};
  auto draw = [&](bool non_negative) {
    float x;
    if (rng() % 4 == 0) {
      x = specials[rng() % (sizeof(specials) / sizeof(specials[0]))];
    } else {
      x = FromBits(static_cast<uint32_t>(rng()));  // any bit pattern, any exponent
    }
    return non_negative && !std::isnan(x) ? std::fabs(x) : x;
  };
  for (size_t i = 0; i < s.n; ++i) {
    s.master()[i] = draw(false);
    s.grad()[i] = draw(false);
    s.m()[i] = draw(false);
    s.v()[i] = draw(true);
    s.param_f32()[i] = -1.0f;
    s.param_bf16()[i] = bf16{0xdead};
  }
}

void Copy(const State& from, State& to) {
  for (size_t i = 0; i < from.n; ++i) {
    const size_t src = from.offset + i, dst = to.offset + i;
    to.master_store[dst] = from.master_store[src];
    to.grad_store[dst] = from.grad_store[src];
    to.m_store[dst] = from.m_store[src];
    to.v_store[dst] = from.v_store[src];
    to.param_f32_store[dst] = from.param_f32_store[src];
    to.param_bf16_store[dst] = from.param_bf16_store[src];
  }
}

enum class Output { kNone, kF32, kBf16, kF32AliasesMaster };

const char* OutputName(Output output) {
  switch (output) {
    case Output::kNone:
      return "none";
    case Output::kF32:
      return "fp32";
    case Output::kBf16:
      return "bf16";
    case Output::kF32AliasesMaster:
      return "fp32=master";
  }
  return "?";
}

void StepReference(State& s, Output output, const AdamParams& hp) {
  switch (output) {
    case Output::kNone:
    case Output::kF32AliasesMaster:
      CpuAdamReference<float>(nullptr, s.master(), s.grad(), s.m(), s.v(), s.n, hp);
      break;
    case Output::kF32:
      CpuAdamReference(s.param_f32(), s.master(), s.grad(), s.m(), s.v(), s.n, hp);
      break;
    case Output::kBf16:
      CpuAdamReference(s.param_bf16(), s.master(), s.grad(), s.m(), s.v(), s.n, hp);
      break;
  }
}

Status StepFast(const CpuAdam& adam, State& s, Output output, const AdamParams& hp) {
  switch (output) {
    case Output::kNone:
      return adam.Step(static_cast<float*>(nullptr), s.master(), s.grad(), s.m(), s.v(), s.n, hp);
    case Output::kF32:
      return adam.Step(s.param_f32(), s.master(), s.grad(), s.m(), s.v(), s.n, hp);
    case Output::kBf16:
      return adam.Step(s.param_bf16(), s.master(), s.grad(), s.m(), s.v(), s.n, hp);
    case Output::kF32AliasesMaster:
      return adam.Step(s.master(), s.master(), s.grad(), s.m(), s.v(), s.n, hp);
  }
  return absl::InternalError("unreachable");
}

// Counts elementwise mismatches, printing the first few.
int64_t CountMismatches(State& want, State& got, Output output, const std::string& where) {
  int64_t mismatches = 0;
  auto report = [&](const char* array, size_t i, uint32_t want_bits, uint32_t got_bits) {
    if (++mismatches <= 5) {
      ADD_FAILURE() << where << ": " << array << "[" << i << "] want 0x" << std::hex << want_bits
                    << " got 0x" << got_bits << std::dec << " (grad " << want.grad()[i] << ")";
    }
  };
  for (size_t i = 0; i < want.n; ++i) {
    if (!SameFloat(want.master()[i], got.master()[i])) {
      report("master", i, Bits(want.master()[i]), Bits(got.master()[i]));
    }
    if (!SameFloat(want.m()[i], got.m()[i])) report("m", i, Bits(want.m()[i]), Bits(got.m()[i]));
    if (!SameFloat(want.v()[i], got.v()[i])) report("v", i, Bits(want.v()[i]), Bits(got.v()[i]));
    if (output == Output::kF32 && !SameFloat(want.param_f32()[i], got.param_f32()[i])) {
      report("param_f32", i, Bits(want.param_f32()[i]), Bits(got.param_f32()[i]));
    }
    if (output == Output::kBf16 && !SameBf16(want.param_bf16()[i], got.param_bf16()[i])) {
      report("param_bf16", i, want.param_bf16()[i].bits, got.param_bf16()[i].bits);
    }
  }
  // Untouched: the fp32 copy when none or bf16 is asked for, the bf16 copy unless asked.
  if (output != Output::kF32) {
    for (size_t i = 0; i < want.n; ++i) {
      if (Bits(got.param_f32()[i]) != Bits(-1.0f)) {
        report("param_f32 (must stay untouched)", i, Bits(-1.0f), Bits(got.param_f32()[i]));
      }
    }
  }
  if (output != Output::kBf16) {
    for (size_t i = 0; i < want.n; ++i) {
      if (got.param_bf16()[i].bits != 0xdead) {
        report("param_bf16 (must stay untouched)", i, 0xdead, got.param_bf16()[i].bits);
      }
    }
  }
  // Nothing written past the end (the masked and scalar tails).
  if (got.param_bf16_store[got.offset + got.n].bits != 0 ||
      got.master_store[got.offset + got.n] != 0.0f || got.m_store[got.offset + got.n] != 0.0f) {
    report("past the end", got.n, 0, 1);
  }
  return mismatches;
}

struct Case {
  CpuAdamPath path;
  size_t n;
  size_t offset;
  int threads;
  Output output;
  float weight_decay;
  float grad_scale;
  bool extreme;
  bool bf16_instruction = true;
  size_t stream_param_min_elements = size_t{1} << 20;  // the default
};

std::string Describe(const Case& c) {
  return std::string(CpuAdamPathName(c.path)) + " n=" + std::to_string(c.n) +
         " offset=" + std::to_string(c.offset) + " threads=" + std::to_string(c.threads) +
         " out=" + OutputName(c.output) + " wd=" + std::to_string(c.weight_decay) +
         " grad_scale=" + std::to_string(c.grad_scale) + (c.extreme ? " extreme" : "") +
         (c.bf16_instruction ? "" : " no-bf16-instruction") +
         " stream_min=" + std::to_string(c.stream_param_min_elements);
}

// Runs `steps` steps of the case on the fast path and the reference; expects equal bits.
void ExpectMatchesReference(const Case& c, int steps = 4) {
  const std::string where = Describe(c);
  CpuAdamOptions options;
  options.path = c.path;
  options.threads = c.threads;
  options.use_bf16_instruction = c.bf16_instruction;
  options.stream_param_min_elements = c.stream_param_min_elements;
  StatusOr<CpuAdam> adam = CpuAdam::Create(options);
  ASSERT_OK(adam) << where;
  ASSERT_EQ(adam->path(), c.path) << where;

  State want(c.n, 0), got(c.n, c.offset);
  if (c.extreme) {
    FillExtreme(want, static_cast<uint32_t>(c.n * 31 + c.offset));
  } else {
    FillTypical(want, static_cast<uint32_t>(c.n * 31 + c.offset));
  }
  Copy(want, got);
  AdamParams hp;
  hp.lr = 3e-4f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = c.weight_decay;
  hp.grad_scale = c.grad_scale;
  for (int step = 1; step <= steps; ++step) {
    hp.step = step;
    StepReference(want, c.output, hp);
    const Status status = StepFast(*adam, got, c.output, hp);
    ASSERT_OK(status) << where;
    ASSERT_EQ(CountMismatches(want, got, c.output, where + " step " + std::to_string(step)), 0);
  }
}

std::vector<CpuAdamPath> SupportedPaths() {
  std::vector<CpuAdamPath> paths;
  for (CpuAdamPath path : kAllPaths) {
    if (CpuAdamPathSupported(path)) {
      paths.push_back(path);
    } else {
      std::printf("[ SKIPPED  ] the %s path: this CPU lacks it\n", CpuAdamPathName(path));
    }
  }
  return paths;
}

// CpuAdamReference is the same specification as the CPU backend's AdamWReference
// (kernels/cpu/adamw.h): equal bits on typical and extreme values, fp32 and bf16 output.
TEST(CpuAdamReference, EqualsAdamWReference) {
  for (bool extreme : {false, true}) {
    for (Output output : {Output::kNone, Output::kF32, Output::kBf16}) {
      State want(20011, 0), got(20011, 0);
      if (extreme) {
        FillExtreme(want, 5);
      } else {
        FillTypical(want, 5);
      }
      Copy(want, got);
      AdamParams hp;
      hp.weight_decay = 0.1f;
      hp.grad_scale = 0.8f;
      for (int step = 1; step <= 3; ++step) {
        hp.step = step;
        switch (output) {
          case Output::kBf16:
            AdamWReference(want.param_bf16(), want.master(), want.grad(), want.m(), want.v(),
                           want.n, hp);
            break;
          case Output::kF32:
            AdamWReference(want.param_f32(), want.master(), want.grad(), want.m(), want.v(), want.n,
                           hp);
            break;
          default:
            AdamWReference<float>(nullptr, want.master(), want.grad(), want.m(), want.v(), want.n,
                                  hp);
        }
        StepReference(got, output, hp);
        ASSERT_EQ(CountMismatches(want, got, output,
                                  std::string("AdamWReference vs CpuAdamReference, out=") +
                                      OutputName(output) + (extreme ? " extreme" : "")),
                  0);
      }
    }
  }
}

TEST(CpuAdam, EveryPathMatchesReferenceBitForBitOnSmallOddSizes) {
  for (CpuAdamPath path : SupportedPaths()) {
    for (size_t n : {1, 7, 8, 15, 16, 17, 31, 33, 63, 100, 1000}) {
      for (Output output : {Output::kNone, Output::kF32, Output::kBf16}) {
        for (float weight_decay : {0.0f, 0.1f}) {
          for (float grad_scale : {1.0f, 0.37f}) {
            // Non-temporal param stores (stream_min 0) start after a head that aligns the
            // param copy; offsets 0-4 give every head length.
            for (size_t stream_min : {size_t{1} << 20, size_t{0}}) {
              ExpectMatchesReference({path, n, n % 5, 1, output, weight_decay, grad_scale,
                                      /*extreme=*/false, /*bf16_instruction=*/true, stream_min});
            }
          }
        }
      }
    }
  }
}

TEST(CpuAdam, EveryPathMatchesReferenceOnLargeArraysWithSeveralThreads) {
  // 1000003 is prime: not a multiple of any vector width or thread count, and with 3 threads
  // the ranges end off the 64-element grid.
  for (CpuAdamPath path : SupportedPaths()) {
    for (int threads : {1, 2, 3}) {
      for (Output output : {Output::kNone, Output::kF32, Output::kBf16}) {
        ExpectMatchesReference({path, 1000003, threads == 3 ? 3u : 0u, threads, output,
                                threads == 2 ? 0.0f : 0.1f, threads == 1 ? 1.0f : 0.5f,
                                /*extreme=*/false});
      }
    }
  }
}

TEST(CpuAdam, EveryPathMatchesReferenceOnExtremeValues) {
  for (CpuAdamPath path : SupportedPaths()) {
    for (Output output : {Output::kNone, Output::kF32, Output::kBf16}) {
      for (float weight_decay : {0.0f, 0.1f}) {
        ExpectMatchesReference({path, 100003, 1, 2, output, weight_decay, 0.7f, /*extreme=*/true});
      }
    }
  }
}

TEST(CpuAdam, IntegerBf16RoundingMatchesToo) {
  if (!CpuAdamPathSupported(CpuAdamPath::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (bool extreme : {false, true}) {
    ExpectMatchesReference({CpuAdamPath::kAvx512, 100003, 2, 2, Output::kBf16, 0.1f, 1.0f, extreme,
                            /*bf16_instruction=*/false});
  }
}

// With zero gradients and moments and no weight decay the weights stay put, so the bf16
// copy of denormal, tiny, huge, infinite and NaN weights tests the rounding alone, including
// the lanes that vcvtne2ps2bf16 (which flushes denormals to zero) must hand back.
TEST(CpuAdam, Bf16CopyOfEveryKindOfWeightIsExact) {
  constexpr size_t n = 100003;
  std::mt19937 rng(9);
  for (CpuAdamPath path : SupportedPaths()) {
    for (bool bf16_instruction : {true, false}) {
      CpuAdamOptions options;
      options.path = path;
      options.use_bf16_instruction = bf16_instruction;
      ASSERT_OK_AND_ASSIGN(const CpuAdam adam, CpuAdam::Create(options));
      State s(n, 0);
      FillTypical(s, 2);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t kind = rng() % 4;
        uint32_t bits = static_cast<uint32_t>(rng());
        if (kind == 0) bits &= 0x807fffffu;                        // denormal or zero
        if (kind == 1) bits = (bits & 0x807fffffu) | 0x00800000u;  // smallest normals
        if (kind == 2) bits |= 0x7f800000u;                        // infinite or NaN
        s.master()[i] = FromBits(bits);
        s.grad()[i] = s.m()[i] = s.v()[i] = 0.0f;
      }
      AdamParams hp;
      hp.weight_decay = 0.0f;
      ASSERT_OK(StepFast(adam, s, Output::kBf16, hp));
      int64_t mismatches = 0;
      for (size_t i = 0; i < n; ++i) {
        const bf16 want = ToBf16(s.master()[i]);
        if (!SameBf16(want, s.param_bf16()[i]) && ++mismatches <= 5) {
          ADD_FAILURE() << adam.path_name() << ": ToBf16(0x" << std::hex << Bits(s.master()[i])
                        << ") = 0x" << want.bits << ", got 0x" << s.param_bf16()[i].bits;
        }
      }
      EXPECT_EQ(mismatches, 0) << adam.path_name();
    }
  }
}

TEST(CpuAdam, Fp32ParamsThatAreTheMasterWeightsAreWrittenOnce) {
  for (CpuAdamPath path : SupportedPaths()) {
    ExpectMatchesReference(
        {path, 1000, 0, 1, Output::kF32AliasesMaster, 0.1f, 1.0f, /*extreme=*/false});
  }
}

// The FMA division of the AVX-512 path depends on the bias corrections c = 1 - beta^step:
// many betas and steps give many divisors, including those where c rounds to exactly 1 and
// those below 2^-20 where the path must fall back to the divider.
TEST(CpuAdam, ExactForManyBetasAndSteps) {
  for (CpuAdamPath path : SupportedPaths()) {
    if (path == CpuAdamPath::kReference) continue;
    CpuAdamOptions options;
    options.path = path;
    options.threads = 1;
    ASSERT_OK_AND_ASSIGN(const CpuAdam adam, CpuAdam::Create(options));
    for (float beta : {0.0f, 0.5f, 0.8f, 0.9f, 0.95f, 0.99f, 0.999f, 0.9999f, 0.9999999f}) {
      State want(4099, 0), got(4099, 0);
      FillTypical(want, 7);
      Copy(want, got);
      AdamParams hp;
      hp.beta1 = beta;
      hp.beta2 = 1.0f - (1.0f - beta) * 0.5f;
      hp.weight_decay = 0.01f;
      for (int step : {1, 2, 3, 5, 10, 20, 50, 100, 1000, 100000}) {
        hp.step = step;
        StepReference(want, Output::kBf16, hp);
        ASSERT_OK(StepFast(adam, got, Output::kBf16, hp));
        const std::string where = std::string(CpuAdamPathName(path)) +
                                  " beta=" + std::to_string(beta) + " step=" + std::to_string(step);
        ASSERT_EQ(CountMismatches(want, got, Output::kBf16, where), 0);
      }
    }
  }
}

TEST(CpuAdam, ForcedPathReallyRuns) {
  for (CpuAdamPath path : SupportedPaths()) {
    CpuAdamOptions options;
    options.path = path;
    options.threads = 2;
    ASSERT_OK_AND_ASSIGN(const CpuAdam adam, CpuAdam::Create(options));
    EXPECT_EQ(adam.path(), path);
    uint64_t before[4];
    for (CpuAdamPath p : kAllPaths) before[static_cast<int>(p)] = CpuAdamSpansRunForTesting(p);
    State s(100000, 0);
    FillTypical(s, 1);
    ASSERT_OK(StepFast(adam, s, Output::kBf16, AdamParams{}));
    for (CpuAdamPath p : kAllPaths) {
      const uint64_t ran = CpuAdamSpansRunForTesting(p) - before[static_cast<int>(p)];
      // 100000 elements on 2 threads: two ranges, both on the forced path.
      EXPECT_EQ(ran, p == path ? 2u : 0u)
          << "forced " << CpuAdamPathName(path) << ", counted " << CpuAdamPathName(p);
    }
  }
}

TEST(CpuAdam, Bf16InstructionIsUsedOnlyWhereAllowed) {
  if (!CpuAdamPathSupported(CpuAdamPath::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  State s(1000, 0);
  FillTypical(s, 3);
  for (bool allowed : {true, false}) {
    CpuAdamOptions options;
    options.path = CpuAdamPath::kAvx512;
    options.use_bf16_instruction = allowed;
    ASSERT_OK_AND_ASSIGN(const CpuAdam adam, CpuAdam::Create(options));
    const uint64_t before = CpuAdamBf16InstructionSpansForTesting();
    ASSERT_OK(StepFast(adam, s, Output::kBf16, AdamParams{}));
    const uint64_t used = CpuAdamBf16InstructionSpansForTesting() - before;
    const bool cpu_has_it = __builtin_cpu_supports("avx512bf16");
    EXPECT_EQ(used, allowed && cpu_has_it ? 1u : 0u) << "allowed=" << allowed;
    EXPECT_EQ(std::string(adam.path_name()), allowed && cpu_has_it ? "avx512+bf16" : "avx512");
  }
}

TEST(CpuAdam, EnvironmentChoosesThePathWhenOptionsSayAuto) {
  const CpuAdamPath best = BestCpuAdamPath();
  EXPECT_NE(best, CpuAdamPath::kAuto);
  ASSERT_EQ(setenv("STRATA_CPU_ADAM", "reference", 1), 0);
  EXPECT_THAT(CpuAdam::Create(), IsOkAndHolds(TakesPath(CpuAdamPath::kReference)));
  EXPECT_THAT(CpuAdam::Create(), IsOkAndHolds(::testing::Property(&CpuAdam::path_name,
                                                                  ::testing::StrEq("reference"))));
  // An explicit option wins over the environment.
  CpuAdamOptions options;
  options.path = best;
  EXPECT_THAT(CpuAdam::Create(options), IsOkAndHolds(TakesPath(best)));
  ASSERT_EQ(setenv("STRATA_CPU_ADAM", "auto", 1), 0);
  EXPECT_THAT(CpuAdam::Create(), IsOkAndHolds(TakesPath(best)));
  ASSERT_EQ(setenv("STRATA_CPU_ADAM", "avx2", 1), 0);
  if (CpuAdamPathSupported(CpuAdamPath::kAvx2)) {
    EXPECT_THAT(CpuAdam::Create(), IsOkAndHolds(TakesPath(CpuAdamPath::kAvx2)));
  } else {
    EXPECT_THAT(CpuAdam::Create(), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  ASSERT_EQ(setenv("STRATA_CPU_ADAM", "sse9", 1), 0);
  EXPECT_THAT(CpuAdam::Create(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          AllOf(HasSubstr("STRATA_CPU_ADAM"), HasSubstr("sse9"))));
  ASSERT_EQ(unsetenv("STRATA_CPU_ADAM"), 0);
  EXPECT_THAT(CpuAdam::Create(), IsOkAndHolds(TakesPath(best)));
}

TEST(CpuAdam, UnsupportedForcedPathIsAnError) {
  for (CpuAdamPath path : kAllPaths) {
    if (CpuAdamPathSupported(path)) continue;
    CpuAdamOptions options;
    options.path = path;
    EXPECT_THAT(CpuAdam::Create(options), StatusIs(absl::StatusCode::kFailedPrecondition));
    return;
  }
  GTEST_SKIP() << "this CPU supports every path";
}

TEST(CpuAdam, PathNamesRoundTrip) {
  for (CpuAdamPath path :
       {CpuAdamPath::kAuto, CpuAdamPath::kReference, CpuAdamPath::kAvx2, CpuAdamPath::kAvx512}) {
    EXPECT_THAT(ParseCpuAdamPath(CpuAdamPathName(path)), IsOkAndHolds(path));
  }
  EXPECT_FALSE(ParseCpuAdamPath("AVX512").ok());
}

TEST(CpuAdam, RejectsBadArguments) {
  ASSERT_OK_AND_ASSIGN(const CpuAdam adam, CpuAdam::Create());
  State s(10, 0);
  AdamParams hp;
  hp.step = 0;
  EXPECT_EQ(StepFast(adam, s, Output::kF32, hp).code(), absl::StatusCode::kInvalidArgument);
  hp.step = 1;
  EXPECT_EQ(adam.Step(s.param_f32(), nullptr, s.grad(), s.m(), s.v(), 10, hp).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_OK(adam.Step(s.param_f32(), nullptr, nullptr, nullptr, nullptr, 0, hp));
  EXPECT_OK(adam.Step(DType::kBF16, s.param_bf16(), s.master(), s.grad(), s.m(), s.v(), 10, hp));
}

TEST(AdamTrafficReference, RewritesStateUnchangedAndWritesUpperBits) {
  for (size_t n : {1, 17, 100, 1000003}) {
    for (bool with_param : {false, true}) {
      State s(n, n % 3), before(n, n % 3);
      FillTypical(s, 11);
      Copy(s, before);
      AdamTrafficReference(with_param ? s.param_bf16() : nullptr, s.master(), s.grad(), s.m(),
                           s.v(), n, 2);
      int64_t mismatches = 0;
      for (size_t i = 0; i < n; ++i) {
        // x + 0 * grad is x except that -0 becomes +0.
        mismatches += s.master()[i] != before.master()[i] || s.m()[i] != before.m()[i] ||
                      s.v()[i] != before.v()[i];
        const uint16_t want =
            with_param ? static_cast<uint16_t>(Bits(s.master()[i]) >> 16) : uint16_t{0xdead};
        mismatches += s.param_bf16()[i].bits != want;
      }
      EXPECT_EQ(mismatches, 0) << "n=" << n << " param=" << with_param;
    }
  }
  const std::string isa = AdamTrafficReferenceIsaName();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "scalar") << isa;
}

}  // namespace
}  // namespace strata::cpu
