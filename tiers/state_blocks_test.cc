// The stored form of an 8-bit Adam moment (state_blocks.h): the sections' sizes and offsets,
// the conversions from and to fp32 against the kernels' QuantizeMoments/DequantizeMoments
// block by block, the zero form, and the property the NVMe tier relies on: the stored form of
// block-aligned pieces of a range, section by section one after another, is the range's.
#include "tiers/state_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/adam8bit.h"

namespace strata {
namespace {

// A small tensor (fp32 moments), large ones with and without decay, a mixed-decay block, and
// padding: 18432 elements at one rank (9 blocks), runs of both kinds alternating.
UnitLayout MixedUnit() {
  UnitLayout unit("unit");
  unit.Add("small", {100}, false, InitKind::kZeros);      // [0, 100)
  unit.Add("big", {8192}, true, InitKind::kZeros);        // [112, 8304)
  unit.Add("no decay", {4096}, false, InitKind::kZeros);  // [8304, 12400)
  unit.Add("decay", {5000}, true, InitKind::kZeros);      // [12400, 17400)
  return unit;
}

// Moments over n elements: m signed, v positive; a few exact zeros and a block of zeros.
std::vector<float> Moments(size_t n, bool is_signed, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const float u = uniform(rng);
    x[i] = is_signed ? 1e-3f * u : 1e-6f * (1.0f + u);
    if (i % 997 == 0) x[i] = 0.0f;
  }
  std::fill(x.begin() + 4 * kAdamStateBlock, x.begin() + 5 * kAdamStateBlock, 0.0f);
  return x;
}

TEST(StateBlocks, SectionsCountEachKind) {
  // Two fp32 runs and two quantized ones, the last with a partial block.
  const std::vector<StateRun> runs = {{0, 2048, false, false, 0},
                                      {2048, 8192, true, true, 0},
                                      {8192, 10240, false, false, 2048},
                                      {10240, 11000, true, false, 6144}};
  const MomentSections sections = SectionsOf(runs);
  EXPECT_EQ(sections.fp32, 4096u);
  EXPECT_EQ(sections.codes, 6144u + 760u);
  EXPECT_EQ(sections.blocks, 3u + 1u);
  EXPECT_EQ(sections.codes_offset(), 4096u * 4);
  EXPECT_EQ(sections.absmax_offset(), 4096u * 4 + 6904u);
  EXPECT_EQ(sections.bytes(), 4096u * 4 + 6904u + 4u * 4);
  EXPECT_EQ(SectionsOf({}).bytes(), 0u);
  // From the block rule, with a partial last block.
  const MomentSections mixed = SectionsOf(StateRuns(MixedUnit(), {0, 17500}));
  EXPECT_EQ(mixed.fp32, 6144u);
  EXPECT_EQ(mixed.codes, 17500u - 6144u);
  EXPECT_EQ(mixed.blocks, 6u);  // [2048, 8192): 3, [10240, 12288): 1, [14336, 17500): 2
}

// MomentFromFp32 writes each run where the sections say: fp32 runs' values as they are, the
// quantized runs' codes and absmaxes as QuantizeMoments gives them for the run; MomentToFp32
// gives back the values and DequantizeMoments of those codes.
TEST(StateBlocks, ConversionsAreTheKernelsBlockByBlock) {
  const UnitLayout unit = MixedUnit();
  for (const ShardRange range : {ShardRange{0, 18432}, ShardRange{10240, 20480}}) {
    const std::vector<StateRun> runs = StateRuns(unit, range);
    const MomentSections sections = SectionsOf(runs);
    const size_t n = range.end - range.begin;
    for (const bool is_signed : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "range " << range.begin << " m " << is_signed);
      const std::vector<float> x = Moments(n, is_signed, 7 + range.begin);
      std::vector<uint8_t> stored(sections.bytes(), 0xEE);
      MomentFromFp32(runs, is_signed, x.data(), stored.data());
      std::vector<float> back(n, std::nanf(""));
      MomentToFp32(runs, is_signed, stored.data(), back.data());
      for (const StateRun& run : runs) {
        const size_t count = run.end - run.begin;
        const size_t at = run.begin - range.begin;
        if (!run.quantized) {
          EXPECT_EQ(std::memcmp(stored.data() + run.slot * 4, x.data() + at, count * 4), 0);
          EXPECT_EQ(std::memcmp(back.data() + at, x.data() + at, count * 4), 0);
          continue;
        }
        std::vector<uint8_t> codes(count);
        std::vector<float> absmax(cpu::Adam8bitBlocks(count)), decoded(count);
        cpu::QuantizeMoments(x.data() + at, count, is_signed, codes.data(), absmax.data());
        cpu::DequantizeMoments(codes.data(), absmax.data(), count, is_signed, decoded.data());
        EXPECT_EQ(std::memcmp(stored.data() + sections.codes_offset() + run.slot, codes.data(),
                              count),
                  0)
            << "codes of run at " << run.begin;
        EXPECT_EQ(std::memcmp(stored.data() + sections.absmax_offset() +
                                  run.slot / kAdamStateBlock * 4,
                              absmax.data(), absmax.size() * 4),
                  0)
            << "absmaxes of run at " << run.begin;
        EXPECT_EQ(std::memcmp(back.data() + at, decoded.data(), count * 4), 0)
            << "decoded run at " << run.begin;
      }
    }
  }
}

TEST(StateBlocks, ZeroMomentIsTheFormOfZeros) {
  const std::vector<StateRun> runs = StateRuns(MixedUnit(), {0, 18432});
  const size_t bytes = SectionsOf(runs).bytes();
  for (const bool is_signed : {true, false}) {
    std::vector<uint8_t> zero(bytes, 0xEE), expected(bytes, 0x11);
    ZeroMoment(runs, is_signed, zero.data());
    const std::vector<float> zeros(18432, 0.0f);
    MomentFromFp32(runs, is_signed, zeros.data(), expected.data());
    EXPECT_EQ(zero, expected) << is_signed;
    // The signed map's 0.0 is code 127, the unsigned map's code 0.
    EXPECT_EQ(zero[SectionsOf(runs).codes_offset()], is_signed ? 127 : 0);
  }
}

// The NVMe tier keeps a shard's moments as chunks (block-aligned pieces, each numbered from
// its own start): their sections, one after another, are the shard's sections.
TEST(StateBlocks, PiecesConcatenateSectionBySection) {
  const UnitLayout unit = MixedUnit();
  const ShardRange whole{0, 18432};
  const std::vector<StateRun> runs = StateRuns(unit, whole);
  const MomentSections sections = SectionsOf(runs);
  for (const bool is_signed : {true, false}) {
    const std::vector<float> x = Moments(whole.end, is_signed, 11);
    std::vector<uint8_t> stored(sections.bytes());
    MomentFromFp32(runs, is_signed, x.data(), stored.data());
    for (const size_t piece : {size_t{2048}, size_t{4096}, size_t{3 * 2048}}) {
      SCOPED_TRACE(::testing::Message() << "pieces of " << piece << " m " << is_signed);
      std::vector<uint8_t> fp32, codes, absmax;
      for (size_t lo = whole.begin; lo < whole.end; lo += piece) {
        const std::vector<StateRun> piece_runs =
            StateRuns(unit, {lo, std::min(whole.end, lo + piece)});
        const MomentSections part = SectionsOf(piece_runs);
        std::vector<uint8_t> form(part.bytes());
        MomentFromFp32(piece_runs, is_signed, x.data() + lo, form.data());
        fp32.insert(fp32.end(), form.begin(), form.begin() + part.codes_offset());
        codes.insert(codes.end(), form.begin() + part.codes_offset(),
                     form.begin() + part.absmax_offset());
        absmax.insert(absmax.end(), form.begin() + part.absmax_offset(), form.end());
      }
      std::vector<uint8_t> joined = fp32;
      joined.insert(joined.end(), codes.begin(), codes.end());
      joined.insert(joined.end(), absmax.begin(), absmax.end());
      EXPECT_EQ(joined, stored);
    }
  }
}

}  // namespace
}  // namespace strata
