// quantize.h: every fast version bit-identical to its reference (random blocks at many
// scales, all-zero blocks, blocks below kQuantMinAbsmax, huge values, values exactly on the
// decision points, sizes that leave a padded block and span several chunks and absmax
// groups); hand-computed codes; the round-trip error bounds of docs/quantization.md; the
// piece layout QuantizePiece writes and its refusals.
//
// Bounds checked (and the worst ratio printed), per element of block b in group g:
//   nf4   |x - deq| <= 0.15190360 * absmax[b] + 0.00703126 * absmax2[g] + 4 ulp(absmax[b])
//         (the largest half gap of the NF4 values, (1 - 0.6961928) / 2, at the block's real
//         absmax; the largest half gap of the signed map at the group's absmax2, times
//         |value| <= 1; a few roundings)
//   int8  |x - deq| <= absmax[b] / 254 + 2 ulp(absmax[b])
//   bf16  |x - deq| <= 2^-8 |x| (round to nearest, 8 significant bits)
#include "kernels/cpu/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_test_util.h"

namespace strata::cpu {
namespace {

const size_t kSizes[] = {1, 63, 64, 100, 4096 + 17, 257 * 64 + 5, 3 * 16384 + 37};

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

template <typename T>
std::vector<uint32_t> AllBits(const std::vector<T>& values) {
  std::vector<uint32_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      bits[i] = Bits(values[i]);
    } else {
      bits[i] = values[i].bits;
    }
  }
  return bits;
}

// n values in blocks of varied kinds, chosen per block by a seeded generator: normal values
// at scales from 1e-30 to 1e30, all zeros, values below kQuantMinAbsmax (denormals among
// them), one 1.0 with every other element on an NF4 decision point (ties), int8 ties
// (absmax 127, halves), normal values with denormals among them, and values near FLT_MAX
// (whose reciprocal absmax is itself denormal).
std::vector<float> TestValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  const std::array<float, 15>& midpoints = Nf4Midpoints();
  for (size_t begin = 0; begin < n; begin += kQuantBlock) {
    const size_t end = std::min(n, begin + kQuantBlock);
    const int kind = static_cast<int>(rng() % 10);
    const float scale = std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 61) - 30));
    for (size_t i = begin; i < end; ++i) {
      switch (kind) {
        case 0:
          x[i] = 0.0f;
          break;
        case 1:
          x[i] = normal(rng) * 1e-40f;  // below kQuantMinAbsmax, some denormal
          break;
        case 2:
          x[i] = i == begin ? 1.0f : midpoints[rng() % 15];
          break;
        case 3:
          x[i] =
              i == begin ? 127.0f : static_cast<float>(static_cast<int>(rng() % 253) - 126) + 0.5f;
          break;
        case 4:
          x[i] = i % 3 == 0 ? normal(rng) * 1e-41f : normal(rng);
          break;
        case 5:
          x[i] = std::max(-3.4e38f, std::min(3.4e38f, normal(rng) * 1.5e38f));
          break;
        default:
          x[i] = normal(rng) * scale;
      }
    }
  }
  return x;
}

TEST(QuantizeTest, MidpointTables) {
  EXPECT_EQ(Nf4Midpoints()[7], static_cast<float>((0.0 + 0.07958029955625534) / 2));
  EXPECT_EQ(Nf4Midpoints()[0], static_cast<float>((-1.0 + double(-0.6961928009986877f)) / 2));
  EXPECT_EQ(DynamicMapMidpoints(true)[127], static_cast<float>(double(5.5e-7f) / 2));
  for (int i = 0; i + 1 < 15; ++i) EXPECT_LT(Nf4Midpoints()[i], Nf4Midpoints()[i + 1]);
  for (int i = 0; i + 1 < 255; ++i) {
    EXPECT_LT(DynamicMapMidpoints(true)[i], DynamicMapMidpoints(true)[i + 1]);
    EXPECT_LT(DynamicMapMidpoints(false)[i], DynamicMapMidpoints(false)[i + 1]);
  }
}

class QuantizeFastTest : public OddThreadCountTest {};

TEST_F(QuantizeFastTest, EncodingMatchesReference) {
  for (size_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const std::vector<float> x = TestValues(n, static_cast<uint32_t>(n));
    const size_t blocks = (n + 63) / 64;
    std::vector<float> absmax_ref(blocks, -1.0f), absmax(blocks, -2.0f);
    BlockAbsmaxReference(x.data(), n, absmax_ref.data());
    BlockAbsmax(x.data(), n, absmax.data());
    EXPECT_EQ(AllBits(absmax), AllBits(absmax_ref));

    std::vector<uint8_t> nf4_ref(blocks * 32, 0xaa), nf4(blocks * 32, 0x55);
    EncodeNf4Reference(x.data(), n, absmax_ref.data(), nf4_ref.data());
    EncodeNf4(x.data(), n, absmax_ref.data(), nf4.data());
    EXPECT_EQ(nf4, nf4_ref);

    std::vector<int8_t> int8_ref(blocks * 64, 99), int8(blocks * 64, -99);
    EncodeInt8Reference(x.data(), n, absmax_ref.data(), int8_ref.data());
    EncodeInt8(x.data(), n, absmax_ref.data(), int8.data());
    EXPECT_EQ(int8, int8_ref);
  }
}

template <typename T>
class QuantizeDecodeTest : public OddThreadCountTest {};
TYPED_TEST_SUITE(QuantizeDecodeTest, StorageTypes);

TYPED_TEST(QuantizeDecodeTest, DecodingMatchesReference) {
  using T = TypeParam;
  for (size_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const std::vector<float> x = TestValues(n, static_cast<uint32_t>(n) + 7);
    for (BaseDType dtype : {BaseDType::kNF4, BaseDType::kInt8, BaseDType::kBF16}) {
      SCOPED_TRACE(BaseDTypeName(dtype));
      const QuantPiece layout = PieceLayout(dtype, n);
      std::vector<uint8_t> piece(layout.bytes);
      ASSERT_TRUE(QuantizePiece(dtype, x.data(), n, piece.data()).ok());
      std::vector<T> ref(n), fast(n);
      std::memset(static_cast<void*>(ref.data()), 0x11, n * sizeof(T));
      std::memset(static_cast<void*>(fast.data()), 0x22, n * sizeof(T));
      const uint8_t* p = piece.data();
      if (dtype == BaseDType::kNF4) {
        const float offset = *reinterpret_cast<const float*>(p + layout.offset);
        const float* absmax2 = reinterpret_cast<const float*>(p + layout.absmax2);
        DequantizeNf4Reference(ref.data(), p + layout.codes, p + layout.absmax, absmax2, offset, n);
        DequantizeNf4(fast.data(), p + layout.codes, p + layout.absmax, absmax2, offset, n);
      } else if (dtype == BaseDType::kInt8) {
        const int8_t* codes = reinterpret_cast<const int8_t*>(p + layout.codes);
        const float* absmax = reinterpret_cast<const float*>(p + layout.absmax);
        DequantizeInt8Reference(ref.data(), codes, absmax, n);
        DequantizeInt8(fast.data(), codes, absmax, n);
      } else {
        const bf16* in = reinterpret_cast<const bf16*>(p + layout.codes);
        WidenBf16Reference(ref.data(), in, n);
        WidenBf16(fast.data(), in, n);
      }
      EXPECT_EQ(AllBits(fast), AllBits(ref));
      // DequantizePiece (fp32) is the reference; the bf16 output is it rounded once.
      std::vector<float> piece_values(n);
      DequantizePiece(dtype, piece.data(), n, piece_values.data());
      EXPECT_EQ(AllBits(ref), AllBits(ToStorage<T>(piece_values)));
    }
  }
}

TEST(QuantizeTest, Nf4HandCases) {
  // Block 0: absmax 2, so y = x / 2 exactly. Block 1: zeros. Block 2 (4 values, padded):
  // absmax 0.5.
  std::vector<float> x(128 + 4, 0.0f);
  const std::array<float, 16>& v = Nf4Values();
  const std::array<float, 15>& m = Nf4Midpoints();
  x[0] = 2.0f;                        // y = 1: code 15
  x[1] = -2.0f;                       // y = -1: code 0
  x[2] = 2.0f * m[9];                 // on the decision point between codes 9 and 10: the lower
  x[3] = std::nextafter(x[2], 1.0f);  // just above it: 10
  x[4] = 2.0f * v[12];                // exactly a value: its code
  x[5] = -0.0f;                       // 7
  x[6] = 2.0f * m[0];                 // 0
  x[7] = 1e-30f;                      // 7
  x[128] = 0.5f;
  x[129] = -0.1f;  // y = -0.2 (fp32): between v[4] = -0.284 and v[5] = -0.185: 5
  x[130] = 0.0f;
  x[131] = -0.5f;
  std::vector<float> absmax(3);
  BlockAbsmaxReference(x.data(), x.size(), absmax.data());
  EXPECT_EQ(absmax, (std::vector<float>{2.0f, 0.0f, 0.5f}));
  std::vector<uint8_t> codes(96);
  EncodeNf4Reference(x.data(), x.size(), absmax.data(), codes.data());
  EXPECT_EQ(codes[0], 0xf0);                                     // 15, 0
  EXPECT_EQ(codes[1], 0x9a);                                     // 9, 10
  EXPECT_EQ(codes[2], 0xc7);                                     // 12, 7
  EXPECT_EQ(codes[3], 0x07);                                     // 0, 7
  EXPECT_EQ(codes[4], 0x77);                                     // zeros in block 0
  for (int i = 32; i < 64; ++i) EXPECT_EQ(codes[i], 0x77) << i;  // the zero block
  EXPECT_EQ(codes[64], 0xf5);                                    // 15, 5
  EXPECT_EQ(codes[65], 0x70);                                    // 7, 0
  for (int i = 66; i < 96; ++i) EXPECT_EQ(codes[i], 0x77) << i;  // padding: 0.0
}

TEST(QuantizeTest, Int8HandCases) {
  std::vector<float> x(64 + 3, 0.0f);
  x[0] = 127.0f;  // scale 1: the codes are x rounded half to even
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = -127.0f;
  x[5] = 0.49f;
  x[64] = -1.0f;  // scale 127
  x[65] = 0.5f;   // 63.5 -> 64 (even)
  x[66] = 1.0f / 3.0f;
  std::vector<float> absmax(2);
  BlockAbsmaxReference(x.data(), x.size(), absmax.data());
  EXPECT_EQ(absmax, (std::vector<float>{127.0f, 1.0f}));
  std::vector<int8_t> codes(128);
  EncodeInt8Reference(x.data(), x.size(), absmax.data(), codes.data());
  EXPECT_EQ(codes[0], 127);
  EXPECT_EQ(codes[1], 2);
  EXPECT_EQ(codes[2], 4);
  EXPECT_EQ(codes[3], -2);
  EXPECT_EQ(codes[4], -127);
  EXPECT_EQ(codes[5], 0);
  EXPECT_EQ(codes[64], -127);
  EXPECT_EQ(codes[65], 64);
  EXPECT_EQ(codes[66], 42);  // 127 / 3 = 42.33
  EXPECT_EQ(codes[67], 0);   // padding
  std::vector<float> out(67);
  DequantizeInt8Reference(out.data(), codes.data(), absmax.data(), out.size());
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], 4.0f);
  EXPECT_EQ(out[65], 64.0f * (1.0f / 127.0f));
  EXPECT_EQ(out[64], -1.0f);  // -127 * fp32(1/127) rounds back to -1
}

TEST(QuantizeTest, DoubleQuantizationHandCases) {
  // Absmaxes 1, 2, 3: offset 2, c = -1, 0, 1, absmax2 1: codes of -1, 0 and 1 in the map.
  const float absmax[3] = {1.0f, 2.0f, 3.0f};
  uint8_t codes[3];
  float absmax2 = -1.0f, offset = -1.0f;
  QuantizeAbsmaxes(absmax, 3, codes, &absmax2, &offset);
  EXPECT_EQ(offset, 2.0f);
  EXPECT_EQ(absmax2, 1.0f);
  EXPECT_EQ(codes[0], 0);    // -1 lies below the map's lowest value, -0.99296875
  EXPECT_EQ(codes[1], 127);  // 0.0
  EXPECT_EQ(codes[2], 255);  // 1.0
  float decoded[3];
  DequantizeAbsmaxes(codes, &absmax2, offset, 3, decoded);
  EXPECT_EQ(decoded[0], -0.99296875f + 2.0f);
  EXPECT_EQ(decoded[1], 2.0f);
  EXPECT_EQ(decoded[2], 3.0f);

  // Equal absmaxes: every c is 0, absmax2 0, codes the map's 0, decoded exactly.
  const float equal[2] = {0.75f, 0.75f};
  QuantizeAbsmaxes(equal, 2, codes, &absmax2, &offset);
  EXPECT_EQ(absmax2, 0.0f);
  EXPECT_EQ(codes[0], 127);
  EXPECT_EQ(codes[1], 127);
  DequantizeAbsmaxes(codes, &absmax2, offset, 2, decoded);
  EXPECT_EQ(decoded[0], 0.75f);

  // Two groups: the second group's absmax2 is its own.
  std::vector<float> many(kAbsmaxGroup + 1, 1.0f);
  many[0] = 3.0f;
  many[kAbsmaxGroup] = 1.5f;
  std::vector<uint8_t> many_codes(many.size());
  float many_absmax2[2];
  QuantizeAbsmaxes(many.data(), many.size(), many_codes.data(), many_absmax2, &offset);
  EXPECT_EQ(offset, static_cast<float>((3.0 + 1.5 + 255.0) / 257.0));
  EXPECT_EQ(many_absmax2[0], 3.0f - offset);
  EXPECT_EQ(many_absmax2[1], std::fabs(1.5f - offset));
  EXPECT_EQ(many_codes[0], 255);
  EXPECT_EQ(many_codes[kAbsmaxGroup], 1.5f > offset ? 255 : 0);
}

// The largest |x - deq| of each format over random pieces, against the bounds in the header.
TEST(QuantizeTest, RoundTripErrorBounds) {
  const std::array<float, 16>& v = Nf4Values();
  double nf4_half_gap = 0.0;
  for (int i = 0; i + 1 < 16; ++i) {
    nf4_half_gap = std::max(nf4_half_gap, (double(v[i + 1]) - double(v[i])) / 2);
  }
  EXPECT_NEAR(nf4_half_gap, 0.1519036, 1e-7);  // (1 - 0.6961928) / 2
  const std::array<float, 256>& map = DynamicMap(true);
  double map_half_gap = 1.0 + double(map[0]);  // y = -1 decodes to map[0]
  for (int i = 0; i + 1 < 256; ++i) {
    map_half_gap = std::max(map_half_gap, (double(map[i + 1]) - double(map[i])) / 2);
  }
  EXPECT_NEAR(map_half_gap, 0.00703126, 1e-8);

  double worst_nf4 = 0, worst_int8 = 0, worst_bf16 = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const size_t n = 300 * 64 + 29;  // two absmax groups, a padded block
    // Block scales spread over 1e-3..1e3 so the double quantization has work to do.
    std::vector<float> x = RandomFloats(n, -1.0f, 1.0f, seed);
    std::mt19937 rng(seed);
    for (size_t b = 0; b * 64 < n; ++b) {
      const float scale = std::pow(10.0f, static_cast<float>(rng() % 7) - 3.0f);
      for (size_t i = b * 64; i < std::min(n, b * 64 + 64); ++i) x[i] *= scale;
    }
    std::vector<float> absmax((n + 63) / 64);
    BlockAbsmaxReference(x.data(), n, absmax.data());
    for (BaseDType dtype : {BaseDType::kNF4, BaseDType::kInt8, BaseDType::kBF16}) {
      const QuantPiece layout = PieceLayout(dtype, n);
      std::vector<uint8_t> piece(layout.bytes);
      ASSERT_TRUE(QuantizePiece(dtype, x.data(), n, piece.data()).ok());
      std::vector<float> out(n);
      DequantizePiece(dtype, piece.data(), n, out.data());
      const float* absmax2 = reinterpret_cast<const float*>(piece.data() + layout.absmax2);
      for (size_t i = 0; i < n; ++i) {
        const double error = std::fabs(double(x[i]) - double(out[i]));
        const double a = absmax[i / 64];
        const double ulp = a * std::ldexp(1.0, -23);
        double bound = 0;
        double* worst = nullptr;
        if (dtype == BaseDType::kNF4) {
          bound = nf4_half_gap * a + map_half_gap * absmax2[i / 64 / kAbsmaxGroup] + 4 * ulp;
          worst = &worst_nf4;
        } else if (dtype == BaseDType::kInt8) {
          bound = a / 254 + 2 * ulp;
          worst = &worst_int8;
        } else {
          bound = std::fabs(double(x[i])) * std::ldexp(1.0, -8);
          worst = &worst_bf16;
        }
        ASSERT_LE(error, bound) << BaseDTypeName(dtype) << " element " << i << " x=" << x[i]
                                << " out=" << out[i];
        if (bound > 0) *worst = std::max(*worst, error / bound);
      }
    }
  }
  std::printf("worst error / bound: nf4 %.4f, int8 %.4f, bf16 %.4f\n", worst_nf4, worst_int8,
              worst_bf16);
  EXPECT_GT(worst_nf4, 0.5);  // the bounds are near-tight, not vacuous
  EXPECT_GT(worst_int8, 0.5);
}

TEST(QuantizeTest, QuantizePieceWritesTheLayout) {
  const size_t n = 100;
  std::vector<float> x = RandomFloats(n, -3.0f, 3.0f, 5);
  const QuantPiece layout = PieceLayout(BaseDType::kNF4, n);
  std::vector<uint8_t> piece(layout.bytes, 0xee);
  ASSERT_TRUE(QuantizePiece(BaseDType::kNF4, x.data(), n, piece.data()).ok());
  std::vector<float> absmax(2);
  BlockAbsmax(x.data(), n, absmax.data());
  std::vector<uint8_t> codes(64);
  EncodeNf4(x.data(), n, absmax.data(), codes.data());
  EXPECT_EQ(std::vector<uint8_t>(piece.begin(), piece.begin() + 64), codes);
  uint8_t absmax_codes[2];
  float absmax2, offset;
  QuantizeAbsmaxes(absmax.data(), 2, absmax_codes, &absmax2, &offset);
  EXPECT_EQ(piece[layout.absmax], absmax_codes[0]);
  EXPECT_EQ(piece[layout.absmax + 1], absmax_codes[1]);
  EXPECT_EQ(piece[layout.absmax + 2], 0);  // alignment gaps zeroed
  EXPECT_EQ(*reinterpret_cast<const float*>(&piece[layout.absmax2]), absmax2);
  EXPECT_EQ(*reinterpret_cast<const float*>(&piece[layout.offset]), offset);
  EXPECT_EQ(piece[layout.bytes - 1], 0);
}

TEST(QuantizeTest, QuantizePieceRefusesNonFiniteAndTrain) {
  std::vector<float> x(70, 1.0f);
  x[65] = std::nanf("");
  std::vector<uint8_t> piece(PieceLayout(BaseDType::kInt8, 70).bytes, 0xee);
  const Status status = QuantizePiece(BaseDType::kInt8, x.data(), 70, piece.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("value 65 of 70"), std::string::npos)
      << status.message();
  EXPECT_EQ(piece[0], 0xee);  // nothing written
  x[65] = INFINITY;
  EXPECT_FALSE(QuantizePiece(BaseDType::kNF4, x.data(), 70, piece.data()).ok());
  x[65] = 1.0f;
  EXPECT_EQ(QuantizePiece(BaseDType::kTrain, x.data(), 70, piece.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cpu
