// Tests the safetensors reader and writer: round trips for F32 (bit-exact), BF16 (core/dtype.h
// rounding) and F16; F16 conversions exhaustively; a hand-built F16 file; partial reads and
// reads crossing the 4 MiB pieces; sharded directories with their index; the header bytes
// against the format byte for byte; and every malformed file or set, built by hand, with the
// message a user would see. Files go to TEST_TMPDIR.
#include "models/hf/safetensors.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::StatusIs;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return path;
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  std::fclose(file);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::string bytes;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return bytes;
  char chunk[4096];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file)) > 0) bytes.append(chunk, got);
  std::fclose(file);
  return bytes;
}

std::string U64Le(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// A safetensors image: the header's length, the header text as given, then `data`.
std::string Image(const std::string& header, const std::string& data) {
  return U64Le(header.size()) + header + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// A tensor whose elements come from `values`, recording the pieces asked for.
StOutputTensor FromVector(const std::string& name, std::vector<int64_t> shape,
                          const std::vector<float>* values) {
  return {name, std::move(shape), [values](uint64_t begin, uint64_t count, float* out) {
            EXPECT_LE(begin + count, values->size());
            std::memcpy(out, values->data() + begin, count * sizeof(float));
            return absl::OkStatus();
          }};
}

// Element i of a test tensor: distinct, not round numbers, both signs.
float Value(uint64_t i, float scale = 1.0f) {
  return scale * std::sin(0.37f * static_cast<float>(i) + 0.1f) * (1.0f + (i % 7));
}

std::vector<float> Values(uint64_t n, float scale = 1.0f) {
  std::vector<float> values(n);
  for (uint64_t i = 0; i < n; ++i) values[i] = Value(i, scale);
  return values;
}

// The tensor's elements as read back, with the status asserted.
std::vector<float> ReadAll(const SafetensorsSet& set, const std::string& name) {
  const StTensor* tensor = set.Find(name);
  EXPECT_NE(tensor, nullptr) << name;
  if (tensor == nullptr) return {};
  std::vector<float> out(tensor->numel);
  EXPECT_OK(set.ReadFloats(*tensor, 0, tensor->numel, out.data()));
  return out;
}

TEST(SafetensorsTest, DTypeNamesAndSizes) {
  EXPECT_STREQ(StDTypeName(StDType::kF32), "F32");
  EXPECT_STREQ(StDTypeName(StDType::kBF16), "BF16");
  EXPECT_STREQ(StDTypeName(StDType::kF16), "F16");
  EXPECT_EQ(StDTypeBytes(StDType::kF32), 4u);
  EXPECT_EQ(StDTypeBytes(StDType::kBF16), 2u);
  EXPECT_EQ(StDTypeBytes(StDType::kF16), 2u);
}

TEST(SafetensorsTest, F32RoundTripIsBitExact) {
  std::vector<float> a = Values(3 * 5);
  // Special values keep their bits: -0, the smallest subnormal, infinities, NaN payloads.
  std::vector<float> b = {-0.0f,
                          FromBits(0x00000001),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          FromBits(0x7fc12345),
                          FromBits(0xffa00001),
                          std::numeric_limits<float>::max(),
                          1e-38f};
  const std::vector<float> empty;
  const std::string path = TempPath("f32.safetensors");
  ASSERT_OK(WriteSafetensors(path,
                             {FromVector("b.special", {8}, &b), FromVector("a.weight", {3, 5}, &a),
                              FromVector("c.empty", {0, 4}, &empty)},
                             StDType::kF32, {{"format", "pt"}, {"source", "strata"}}));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  ASSERT_EQ(set.tensors().size(), 3u);
  EXPECT_EQ(set.tensors()[0].name, "a.weight");  // sorted by name
  EXPECT_EQ(set.tensors()[1].name, "b.special");
  EXPECT_EQ(set.tensors()[2].name, "c.empty");
  const StTensor* weight = set.Find("a.weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->dtype, StDType::kF32);
  EXPECT_THAT(weight->shape, ElementsAre(3, 5));
  EXPECT_EQ(weight->numel, 15u);
  EXPECT_EQ(weight->bytes, 60u);
  EXPECT_EQ(weight->file, path);
  EXPECT_EQ(set.Find("c.empty")->numel, 0u);
  EXPECT_EQ(set.Find("missing"), nullptr);
  EXPECT_EQ(set.metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"source", "strata"}}));

  const std::vector<float> got_a = ReadAll(set, "a.weight");
  const std::vector<float> got_b = ReadAll(set, "b.special");
  ASSERT_EQ(got_a.size(), a.size());
  ASSERT_EQ(got_b.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(Bits(got_a[i]), Bits(a[i])) << i;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(Bits(got_b[i]), Bits(b[i])) << i;
  // The data is laid out in the given order right after the header: b, a, c.
  const StTensor* special = set.Find("b.special");
  EXPECT_EQ(special->offset % 8, 0u);
  EXPECT_EQ(weight->offset, special->offset + 32);
  EXPECT_EQ(std::filesystem::file_size(path), weight->offset + weight->bytes);
}

TEST(SafetensorsTest, Bf16RoundTripMatchesCoreRounding) {
  std::vector<float> values = Values(1000, 3.0f);
  // Ties in both directions, NaN, infinity, a value that rounds up to infinity.
  values.push_back(FromBits(0x3f808000));  // tie, even below: rounds down
  values.push_back(FromBits(0x3f818000));  // tie, odd below: rounds up
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  values.push_back(-std::numeric_limits<float>::infinity());
  values.push_back(std::numeric_limits<float>::max());
  const std::string path = TempPath("bf16.safetensors");
  ASSERT_OK(WriteSafetensors(
      path, {FromVector("w", {static_cast<int64_t>(values.size())}, &values)}, StDType::kBF16, {}));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  EXPECT_TRUE(set.metadata().empty());
  EXPECT_EQ(set.Find("w")->dtype, StDType::kBF16);
  EXPECT_EQ(set.Find("w")->bytes, values.size() * 2);
  const std::vector<float> got = ReadAll(set, "w");
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bf16 expected;
    Store(&expected, values[i]);
    EXPECT_EQ(Bits(got[i]), Bits(ToFloat(expected))) << i << ": " << values[i];
  }
}

TEST(SafetensorsTest, HalfToFloatKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc100), -2.5f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(Bits(HalfToFloat(0x7d01)), 0x7fa02000u);  // payload kept
}

// Every half converts to the float of its value and back to itself; every midpoint between
// neighbours rounds to the even one, and a hair off it to the nearer one.
TEST(SafetensorsTest, FloatToHalfRoundsToNearestEvenExhaustively) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<uint16_t>(h);
    const float value = HalfToFloat(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(value)))) << h;
      continue;
    }
    // The exact value: the mantissa scaled, independent of the bit manipulation under test.
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    if (exponent != 0x1f) {
      const float expected = (exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                                            : std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15));
      ASSERT_EQ(std::fabs(value), expected) << h;
      ASSERT_EQ(std::signbit(value), (h & 0x8000) != 0) << h;
    }
    ASSERT_EQ(FloatToHalf(value), half) << h;
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (uint16_t h = 0; h < 0x7bff; ++h) {  // 0x7bff and infinity: below
    const float low = HalfToFloat(h);
    const float high = HalfToFloat(static_cast<uint16_t>(h + 1));
    const float middle = (low + high) / 2;  // exact: a half has 11 significant bits
    const uint16_t even = (h & 1) == 0 ? h : static_cast<uint16_t>(h + 1);
    ASSERT_EQ(FloatToHalf(middle), even) << h;
    ASSERT_EQ(FloatToHalf(-middle), even | 0x8000) << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(middle, 0.0f)), h) << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(middle, inf)), h + 1) << h;
  }
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the tie above the largest half: infinity
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0: even
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(-1e-30f), 0x8000);
  EXPECT_EQ(FloatToHalf(FromBits(0x00000001)), 0x0000);  // a float subnormal
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
}

// A file written byte by byte here, as another writer would, read as fp32.
TEST(SafetensorsTest, ReadsHandWrittenF16) {
  const std::vector<uint16_t> halves = {0x3c00, 0xc100, 0x7bff, 0x0001,
                                        0x7c00, 0xfc00, 0x8000, 0x03ff};
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[2,4],"data_offsets":[0,16]},"__metadata__":{"k":"v"}})";
  const std::string path =
      WriteFile(TempPath("hand_f16.safetensors"), Image(header, Bytes(halves)));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  EXPECT_EQ(set.metadata(), (std::map<std::string, std::string>{{"k", "v"}}));
  const StTensor* tensor = set.Find("h");
  ASSERT_NE(tensor, nullptr);
  EXPECT_EQ(tensor->dtype, StDType::kF16);
  EXPECT_EQ(tensor->offset, 8 + header.size());
  const std::vector<float> got = ReadAll(set, "h");
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(got, ElementsAre(1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), inf, -inf, -0.0f,
                               std::ldexp(1023.0f, -24)));
  EXPECT_TRUE(std::signbit(got[6]));
  // Two in the middle.
  float pair[2];
  ASSERT_OK(set.ReadFloats(*tensor, 3, 2, pair));
  EXPECT_EQ(pair[0], std::ldexp(1.0f, -24));
  EXPECT_EQ(pair[1], inf);
}

// Large 16-bit reads (O_DIRECT where the file system allows) widen every bit pattern as the
// scalar conversions do (ToFloat, HalfToFloat: NaN payloads kept), bit for bit, whether the
// data lands 2-byte aligned in memory (the vectorised bf16 cast) or at an odd address (a
// header of odd length: element by element); ReadBf16 and ReadBf16View give the bf16 bits
// as they are at either address, and refuse an F16 tensor.
TEST(SafetensorsTest, LargeHalfReadsWidenEveryBitPattern) {
  const uint64_t numel = 3 * 65536 + 11;  // 384 KiB per tensor: above the direct size
  std::vector<uint16_t> bits(numel);
  for (uint64_t i = 0; i < numel; ++i) bits[i] = static_cast<uint16_t>(i * 40503u);
  for (const int pad : {0, 1}) {
    const uint64_t bytes = numel * 2;
    std::string header =
        absl::StrCat(R"({"b":{"dtype":"BF16","shape":[)", numel, R"(],"data_offsets":[0,)", bytes,
                     R"(]},"h":{"dtype":"F16",)", R"("shape":[)", numel, R"(],"data_offsets":[)",
                     bytes, ",", 2 * bytes, "]}}");
    header.append((header.size() % 2 == 0 ? 0 : 1) + pad, ' ');  // even, or odd with pad
    const std::string path = WriteFile(TempPath(absl::StrCat("widen", pad, ".safetensors")),
                                       Image(header, Bytes(bits) + Bytes(bits)));
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
    EXPECT_EQ(set.Find("b")->offset % 2, static_cast<uint64_t>(pad));
    for (const auto& [name, begin] :
         {std::pair<std::string, uint64_t>{"b", 0}, {"b", 5}, {"h", 0}, {"h", 5}}) {
      const uint64_t count = numel - begin - 3;
      std::vector<float> got(count);
      ASSERT_OK(set.ReadFloats(*set.Find(name), begin, count, got.data()));
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t b = bits[begin + i];
        const float want = name == "b" ? ToFloat(bf16{b}) : HalfToFloat(b);
        ASSERT_EQ(Bits(got[i]), Bits(want)) << name << " pad " << pad << " element " << begin + i;
      }
      if (name == "h") {  // not BF16: no raw bf16 reads
        bf16 raw[1];
        EXPECT_THAT(set.ReadBf16(*set.Find(name), 0, 1, raw, nullptr),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             AllOf(HasSubstr("'h'"), HasSubstr("F16, not BF16"))));
        EXPECT_THAT(set.ReadBf16View(*set.Find(name), 0, 1).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not BF16")));
        continue;
      }
      // The raw bits as they are (with and without the fp32 values), and as a view.
      std::vector<bf16> raw(count);
      std::vector<float> widened(count);
      ASSERT_OK(set.ReadBf16(*set.Find(name), begin, count, raw.data(), widened.data()));
      ASSERT_OK_AND_ASSIGN(const bf16* view, set.ReadBf16View(*set.Find(name), begin, count));
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_EQ(raw[i].bits, bits[begin + i]) << "pad " << pad << " element " << begin + i;
        ASSERT_EQ(view[i].bits, bits[begin + i]) << "pad " << pad << " element " << begin + i;
        ASSERT_EQ(Bits(widened[i]), Bits(got[i])) << "pad " << pad << " element " << begin + i;
      }
      std::vector<bf16> raw_only(count);
      ASSERT_OK(set.ReadBf16(*set.Find(name), begin, count, raw_only.data(), nullptr));
      EXPECT_EQ(std::memcmp(raw_only.data(), raw.data(), count * sizeof(bf16)), 0);
    }
  }
}

TEST(SafetensorsTest, F16RoundTripRoundsToNearestEven) {
  std::vector<float> values = Values(500, 100.0f);
  values.push_back(70000.0f);  // beyond the largest half: infinity
  values.push_back(1e-7f);     // a half subnormal
  const std::string path = TempPath("f16.safetensors");
  ASSERT_OK(WriteSafetensors(
      path, {FromVector("w", {static_cast<int64_t>(values.size())}, &values)}, StDType::kF16, {}));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  const std::vector<float> got = ReadAll(set, "w");
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(got[i], HalfToFloat(FloatToHalf(values[i]))) << i;
  }
  EXPECT_EQ(got[500], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[501], std::ldexp(2.0f, -24));  // 1e-7 = 1.68 * 2^-24: nearest is 2 * 2^-24
}

TEST(SafetensorsTest, PartialReadsInTheMiddle) {
  const std::vector<float> values = Values(3 * 5 * 7);
  for (const StDType dtype : {StDType::kF32, StDType::kBF16, StDType::kF16}) {
    const std::string path = TempPath(absl::StrCat("partial_", StDTypeName(dtype), ".safetensors"));
    ASSERT_OK(WriteSafetensors(path, {FromVector("t", {3, 5, 7}, &values)}, dtype, {}));
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
    const StTensor& tensor = *set.Find("t");
    const std::vector<float> all = ReadAll(set, "t");
    for (const auto& [begin, count] : std::vector<std::pair<uint64_t, uint64_t>>{
             {0, 1}, {13, 40}, {35, 35}, {104, 1}, {50, 0}, {105, 0}, {1, 103}}) {
      std::vector<float> part(count + 1, 12345.0f);
      ASSERT_OK(set.ReadFloats(tensor, begin, count, part.data()))
          << StDTypeName(dtype) << " " << begin << "+" << count;
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_EQ(Bits(part[i]), Bits(all[begin + i])) << StDTypeName(dtype) << " " << begin + i;
      }
      EXPECT_EQ(part[count], 12345.0f) << "wrote past count";
    }
    float sink[4];
    EXPECT_THAT(set.ReadFloats(tensor, 100, 6, sink),
                StatusIs(absl::StatusCode::kOutOfRange,
                         AllOf(HasSubstr("'t'"), HasSubstr("[100, 106)"), HasSubstr("105"))));
    EXPECT_THAT(set.ReadFloats(tensor, 106, 0, sink), StatusIs(absl::StatusCode::kOutOfRange));
    EXPECT_THAT(set.ReadFloats(tensor, 1, std::numeric_limits<uint64_t>::max(), sink),
                StatusIs(absl::StatusCode::kOutOfRange));
  }
}

// Tensors larger than one 4 MiB piece: the producer is asked in increasing pieces of at most
// 1 Mi elements, and reads that cross piece boundaries at odd places come back right.
TEST(SafetensorsTest, LargeTensorsGoInPieces) {
  const uint64_t numel = (uint64_t{5} << 20) + 3;  // 20 MiB of F32
  for (const StDType dtype : {StDType::kF32, StDType::kBF16}) {
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
    StOutputTensor big{"big",
                       {static_cast<int64_t>(numel)},
                       [&pieces](uint64_t begin, uint64_t count, float* out) {
                         pieces.emplace_back(begin, count);
                         for (uint64_t i = 0; i < count; ++i) {
                           out[i] = static_cast<float>((begin + i) % 251) - 125.0f;
                         }
                         return absl::OkStatus();
                       }};
    const std::string path = TempPath(absl::StrCat("big_", StDTypeName(dtype), ".safetensors"));
    ASSERT_OK(WriteSafetensors(path, {big}, dtype, {}));
    uint64_t next = 0;
    for (const auto& [begin, count] : pieces) {
      EXPECT_EQ(begin, next);
      EXPECT_LE(count, uint64_t{1} << 20);
      next = begin + count;
    }
    EXPECT_EQ(next, numel);
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
    const StTensor& tensor = *set.Find("big");
    const uint64_t begin = 777;
    const uint64_t count = numel - 1500;
    std::vector<float> got(count);
    ASSERT_OK(set.ReadFloats(tensor, begin, count, got.data()));
    for (uint64_t i = 0; i < count; ++i) {
      ASSERT_EQ(got[i], static_cast<float>((begin + i) % 251) - 125.0f) << i;
    }
  }
}

TEST(SafetensorsTest, ProducerErrorStopsTheWriteAndLeavesNoFile) {
  const std::string path = TempPath("failing.safetensors");
  StOutputTensor failing{"w", {4}, [](uint64_t, uint64_t, float*) {
                           return absl::UnavailableError("rank 3 did not answer");
                         }};
  EXPECT_THAT(WriteSafetensors(path, {failing}, StDType::kF32, {}),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("rank 3"))));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST(SafetensorsTest, WriterRejectsBadTensors) {
  const std::vector<float> values = Values(4);
  const std::string path = TempPath("rejected.safetensors");
  EXPECT_THAT(WriteSafetensors(path, {FromVector("w", {4}, &values), FromVector("w", {4}, &values)},
                               StDType::kF32, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w' is given twice")));
  EXPECT_THAT(WriteSafetensors(path, {FromVector("w", {-4}, &values)}, StDType::kF32, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(WriteSafetensors(path, {FromVector("__metadata__", {4}, &values)}, StDType::kF32, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("__metadata__")));
  EXPECT_THAT(WriteSafetensors(path, {{"w", {4}, nullptr}}, StDType::kF32, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no fill")));
  EXPECT_THAT(WriteSafetensors(path, {FromVector("bad\xff", {4}, &values)}, StDType::kF32, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// The bytes the format prescribes for one small tensor: 8-byte little-endian header length,
// compact JSON with sorted keys padded with spaces to a multiple of 8, then the data.
TEST(SafetensorsTest, HeaderBytesMatchTheFormat) {
  const std::vector<float> values = {1.0f, -2.0f};
  const std::string path = TempPath("exact.safetensors");
  ASSERT_OK(
      WriteSafetensors(path, {FromVector("w", {2}, &values)}, StDType::kF32, {{"format", "pt"}}));
  // 85 bytes of JSON, padded with 3 spaces to 88 = 0x58.
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"w":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";
  ASSERT_EQ(json.size(), 85u);
  std::string expected("\x58\0\0\0\0\0\0\0", 8);
  expected += json + "   ";
  expected += std::string("\x00\x00\x80\x3f", 4);  // 1.0f
  expected += std::string("\x00\x00\x00\xc0", 4);  // -2.0f
  EXPECT_EQ(ReadFile(path), expected);

  // Without metadata there is no "__metadata__" key; BF16 data right after the padding.
  const std::string bf16_path = TempPath("exact_bf16.safetensors");
  ASSERT_OK(WriteSafetensors(bf16_path, {FromVector("w", {2}, &values)}, StDType::kBF16, {}));
  const std::string bf16_json = R"({"w":{"data_offsets":[0,4],"dtype":"BF16","shape":[2]}})";
  ASSERT_EQ(bf16_json.size(), 55u);
  std::string bf16_expected("\x38\0\0\0\0\0\0\0", 8);
  bf16_expected += bf16_json + " ";
  bf16_expected += std::string("\x80\x3f\x00\xc0", 4);
  EXPECT_EQ(ReadFile(bf16_path), bf16_expected);

  // No tensors: "{}" and six spaces; with metadata alone, 35 bytes and five spaces.
  const std::string empty_path = TempPath("exact_empty.safetensors");
  ASSERT_OK(WriteSafetensors(empty_path, {}, StDType::kF32, {}));
  EXPECT_EQ(ReadFile(empty_path), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  ASSERT_OK(WriteSafetensors(empty_path, {}, StDType::kF32, {{"framework", "pt"}}));
  EXPECT_EQ(ReadFile(empty_path), std::string("\x28\0\0\0\0\0\0\0", 8) +
                                      R"({"__metadata__":{"framework":"pt"}})" + "     ");
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet empty, SafetensorsSet::OpenFile(empty_path));
  EXPECT_TRUE(empty.tensors().empty());
  EXPECT_EQ(empty.metadata().at("framework"), "pt");
}

// A file with padding after the JSON (as the reference writes) and entries in any key order.
TEST(SafetensorsTest, ReadsReferenceStyleHeaders) {
  const std::string header = R"({"b":{"shape":[],"dtype":"F32","data_offsets":[4,8]},)"
                             R"("a":{"data_offsets":[0,4],"shape":[1],"dtype":"F32"}}      )";
  const std::string path =
      WriteFile(TempPath("ref.safetensors"), Image(header, Bytes(std::vector<float>{3.0f, 4.0f})));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  EXPECT_THAT(ReadAll(set, "a"), ElementsAre(3.0f));
  EXPECT_THAT(ReadAll(set, "b"), ElementsAre(4.0f));  // a scalar: shape [] holds one element
  EXPECT_TRUE(set.Find("b")->shape.empty());
}

TEST(SafetensorsTest, CopiesShareTheOpenFiles) {
  const std::vector<float> values = Values(6);
  const std::string path = TempPath("copied.safetensors");
  ASSERT_OK(WriteSafetensors(path, {FromVector("w", {6}, &values)}, StDType::kF32, {}));
  std::optional<SafetensorsSet> copy;
  {
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
    copy = set;
  }
  EXPECT_EQ(ReadAll(*copy, "w"), values);
  StTensor foreign = *copy->Find("w");
  foreign.file = TempPath("elsewhere.safetensors");
  float sink[6];
  EXPECT_THAT(copy->ReadFloats(foreign, 0, 6, sink),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not part of this set")));
}

// ---- directories ----

std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(SafetensorsTest, ShardedDirectoryRoundTrip) {
  // 40 + 24 + 32 + 100 + 8 bytes of F32 with a 64-byte limit: [a, b] (64), [c] (c + d would
  // be 132), [d] alone (larger than the limit), [e].
  const std::vector<float> a = Values(10), b = Values(6, 2.0f), c = Values(8, 3.0f),
                           d = Values(25, 4.0f), e = Values(2, 5.0f);
  const std::vector<StOutputTensor> tensors = {
      FromVector("z.a", {2, 5}, &a), FromVector("y.b", {6}, &b), FromVector("x.c", {2, 2, 2}, &c),
      FromVector("w.d", {25}, &d), FromVector("v.e", {2}, &e)};
  const std::string dir = FreshDir("sharded");
  ASSERT_OK_AND_ASSIGN(
      const std::vector<std::string> files,
      WriteSafetensorsDirectory(dir, tensors, StDType::kF32, 64, {{"format", "pt"}}));
  EXPECT_THAT(files, ElementsAre(dir + "/model-00001-of-00004.safetensors",
                                 dir + "/model-00002-of-00004.safetensors",
                                 dir + "/model-00003-of-00004.safetensors",
                                 dir + "/model-00004-of-00004.safetensors",
                                 dir + "/model.safetensors.index.json"));
  const nlohmann::json index =
      nlohmann::json::parse(ReadFile(dir + "/model.safetensors.index.json"));
  const nlohmann::json expected_index = {{"metadata", {{"total_size", 204}}},
                                         {"weight_map",
                                          {{"z.a", "model-00001-of-00004.safetensors"},
                                           {"y.b", "model-00001-of-00004.safetensors"},
                                           {"x.c", "model-00002-of-00004.safetensors"},
                                           {"w.d", "model-00003-of-00004.safetensors"},
                                           {"v.e", "model-00004-of-00004.safetensors"}}}};
  EXPECT_EQ(index, expected_index) << index.dump(2);
  EXPECT_EQ(ReadFile(dir + "/model.safetensors.index.json"), expected_index.dump(2) + "\n");

  // Each shard is a safetensors file of its own, with the metadata.
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet first,
                       SafetensorsSet::OpenFile(dir + "/model-00001-of-00004.safetensors"));
  ASSERT_EQ(first.tensors().size(), 2u);
  EXPECT_EQ(first.tensors()[0].name, "y.b");
  EXPECT_EQ(first.tensors()[1].name, "z.a");
  EXPECT_EQ(first.metadata().at("format"), "pt");

  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
  ASSERT_EQ(set.tensors().size(), 5u);
  EXPECT_EQ(set.tensors()[0].name, "v.e");
  EXPECT_EQ(set.tensors()[4].name, "z.a");
  EXPECT_EQ(set.Find("w.d")->file, dir + "/model-00003-of-00004.safetensors");
  EXPECT_EQ(set.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(ReadAll(set, "z.a"), a);
  EXPECT_EQ(ReadAll(set, "y.b"), b);
  EXPECT_EQ(ReadAll(set, "x.c"), c);
  EXPECT_EQ(ReadAll(set, "w.d"), d);
  EXPECT_EQ(ReadAll(set, "v.e"), e);
  float middle[3];
  ASSERT_OK(set.ReadFloats(*set.Find("w.d"), 11, 3, middle));
  EXPECT_THAT(middle, ElementsAre(d[11], d[12], d[13]));
}

TEST(SafetensorsTest, ThreeShardsAndSmallDirectoriesAndStaleFiles) {
  const std::vector<float> values = Values(16);  // 64 bytes of F32, 32 of BF16
  std::vector<StOutputTensor> tensors;
  for (const char* name : {"l0", "l1", "l2", "l3", "l4"}) {
    tensors.push_back(FromVector(name, {4, 4}, &values));
  }
  const std::string dir = FreshDir("three");
  // 5 * 32 bytes of BF16 with a 64-byte limit: 2 + 2 + 1.
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> files,
                       WriteSafetensorsDirectory(dir, tensors, StDType::kBF16, 64, {}));
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[2], dir + "/model-00003-of-00003.safetensors");
  ASSERT_OK_AND_ASSIGN(SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
  EXPECT_EQ(set.Find("l4")->file, dir + "/model-00003-of-00003.safetensors");
  EXPECT_EQ(set.Find("l1")->file, dir + "/model-00001-of-00003.safetensors");
  const std::vector<float> l3 = ReadAll(set, "l3");
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(l3[i], ToFloat(ToBf16(values[i])));
  const nlohmann::json index =
      nlohmann::json::parse(ReadFile(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 160);

  // Everything fits: one model.safetensors, and the shards and index of before are gone.
  ASSERT_OK_AND_ASSIGN(files, WriteSafetensorsDirectory(dir, tensors, StDType::kBF16, 160, {}));
  EXPECT_THAT(files, ElementsAre(dir + "/model.safetensors"));
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre("model.safetensors"));
  ASSERT_OK_AND_ASSIGN(set, SafetensorsSet::OpenDirectory(dir));
  EXPECT_EQ(set.tensors().size(), 5u);
  EXPECT_EQ(set.Find("l0")->file, dir + "/model.safetensors");

  // Sharded again: model.safetensors goes.
  ASSERT_OK_AND_ASSIGN(files, WriteSafetensorsDirectory(dir, tensors, StDType::kF32, 128, {}));
  EXPECT_EQ(files.size(), 4u);  // 2 + 2 + 1 shards of 64-byte tensors, and the index
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  ASSERT_OK_AND_ASSIGN(set, SafetensorsSet::OpenDirectory(dir));
  EXPECT_EQ(ReadAll(set, "l2"), values);

  EXPECT_THAT(WriteSafetensorsDirectory(dir, tensors, StDType::kF32, 0, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_shard_bytes")));
}

TEST(SafetensorsTest, DirectoryWithNeitherFile) {
  const std::string dir = FreshDir("empty_dir");
  std::filesystem::create_directories(dir);
  EXPECT_THAT(SafetensorsSet::OpenDirectory(dir),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(dir), HasSubstr("neither model.safetensors nor "
                                                       "model.safetensors.index.json"))));
  EXPECT_THAT(SafetensorsSet::OpenDirectory(dir + "/absent"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(SafetensorsSet::OpenFile(dir + "/absent.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.safetensors")));
  EXPECT_THAT(SafetensorsSet::OpenFile(dir),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory")));
}

// ---- malformed files ----

// Opens an image written to a file and expects an error with `code` whose message names
// the file and contains every fragment.
void ExpectBadFile(const std::string& name, const std::string& image, absl::StatusCode code,
                   const std::vector<std::string>& fragments) {
  SCOPED_TRACE(name);
  const std::string path = WriteFile(TempPath(name + ".safetensors"), image);
  const StatusOr<SafetensorsSet> opened = SafetensorsSet::OpenFile(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), code) << opened.status();
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr(path));
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(opened.status().message()), HasSubstr(fragment));
  }
}

const std::string kEightFloats = Bytes(std::vector<float>(8, 1.0f));  // 32 bytes of data

std::string OneTensor(const std::string& entry, const std::string& data = kEightFloats) {
  return Image(R"({"t":)" + entry + "}", data);
}

TEST(SafetensorsTest, RejectsBadLengths) {
  using Code = absl::StatusCode;
  ExpectBadFile("short", std::string("\x10\0\0", 3), Code::kDataLoss, {"3 bytes", "fewer than"});
  ExpectBadFile("empty", "", Code::kDataLoss, {"0 bytes"});
  ExpectBadFile("long_header", U64Le(1000) + R"({"t":{}})", Code::kDataLoss,
                {"header length 1000", "truncated"});
  ExpectBadFile("huge_header", U64Le(uint64_t{1} << 40) + "{}", Code::kInvalidArgument,
                {"header length 1099511627776", "100 MiB"});
  ExpectBadFile("header_over_limit", U64Le((uint64_t{100} << 20) + 1) + "{}",
                Code::kInvalidArgument, {"100 MiB"});
}

TEST(SafetensorsTest, RejectsBadJson) {
  using Code = absl::StatusCode;
  ExpectBadFile("not_json", Image("{\"t\": [1, 2", ""), Code::kInvalidArgument,
                {"header is not valid UTF-8 JSON"});
  ExpectBadFile("bad_utf8", Image("{\"t\xff\xfe\": {}}", ""), Code::kInvalidArgument,
                {"header is not valid UTF-8 JSON", "\\xff"});
  ExpectBadFile("not_object", Image("[1, 2, 3]", ""), Code::kInvalidArgument,
                {"not a JSON object", "array"});
  ExpectBadFile("nul_padding", Image(std::string("{}\0\0", 4), ""), Code::kInvalidArgument,
                {"not valid UTF-8 JSON"});
  ExpectBadFile("bad_metadata", Image(R"({"__metadata__":{"n":3}})", ""), Code::kInvalidArgument,
                {"__metadata__", "'n'", "not a string"});
  ExpectBadFile("duplicate_name",
                Image(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                      R"("t":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                      kEightFloats),
                Code::kInvalidArgument, {"tensor name 't' appears twice"});
  ExpectBadFile("duplicate_field",
                OneTensor(R"({"dtype":"F32","dtype":"F16","shape":[8],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"'dtype' appears twice", "'t'"});
}

TEST(SafetensorsTest, RejectsBadEntries) {
  using Code = absl::StatusCode;
  ExpectBadFile("entry_not_object", OneTensor("[1]"), Code::kInvalidArgument,
                {"tensor 't'", "not an object"});
  ExpectBadFile("no_dtype", OneTensor(R"({"shape":[8],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "lacks \"dtype\""});
  ExpectBadFile("no_shape", OneTensor(R"({"dtype":"F32","data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "lacks \"shape\""});
  ExpectBadFile("no_offsets", OneTensor(R"({"dtype":"F32","shape":[8]})"), Code::kInvalidArgument,
                {"tensor 't'", "lacks \"data_offsets\""});
  ExpectBadFile("dtype_number", OneTensor(R"({"dtype":32,"shape":[8],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "\"dtype\" is not a string"});
  ExpectBadFile("shape_string", OneTensor(R"({"dtype":"F32","shape":"8","data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "\"shape\" is not an array"});
  ExpectBadFile("shape_float", OneTensor(R"({"dtype":"F32","shape":[8.0],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "non-integer"});
  ExpectBadFile("offsets_three",
                OneTensor(R"({"dtype":"F32","shape":[8],"data_offsets":[0,16,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "\"data_offsets\" is not two"});
  ExpectBadFile("offsets_negative",
                OneTensor(R"({"dtype":"F32","shape":[8],"data_offsets":[-4,28]})"),
                Code::kInvalidArgument, {"tensor 't'", "non-negative"});
  ExpectBadFile("i64", OneTensor(R"({"dtype":"I64","shape":[4],"data_offsets":[0,32]})"),
                Code::kInvalidArgument,
                {"tensor 't'", "dtype I64 is not supported", "F32, BF16, F16"});
  ExpectBadFile("unknown_dtype", OneTensor(R"({"dtype":"Q7","shape":[8],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "unknown dtype 'Q7'"});
  ExpectBadFile("negative_shape",
                OneTensor(R"({"dtype":"F32","shape":[-2,-4],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "negative dimension", "[-2,-4]"});
  ExpectBadFile("huge_shape",
                OneTensor(R"({"dtype":"F32","shape":[4294967296,4294967296],)"
                          R"("data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "too large"});
  ExpectBadFile("end_before_begin",
                OneTensor(R"({"dtype":"F32","shape":[8],"data_offsets":[32,0]})"),
                Code::kInvalidArgument, {"tensor 't'", "end before they begin"});
  ExpectBadFile(
      "wrong_length", OneTensor(R"({"dtype":"F32","shape":[2,4],"data_offsets":[0,28]})"),
      Code::kInvalidArgument,
      {"tensor 't'", "data_offsets [0, 28] hold 28 bytes", "shape [2, 4] of F32 needs 8 * 4 = 32"});
  ExpectBadFile("wrong_length_bf16",
                OneTensor(R"({"dtype":"BF16","shape":[8],"data_offsets":[0,32]})"),
                Code::kInvalidArgument, {"tensor 't'", "BF16 needs 8 * 2 = 16"});
}

TEST(SafetensorsTest, RejectsBadLayouts) {
  using Code = absl::StatusCode;
  // Offsets beyond the data: the file lost its tail.
  ExpectBadFile(
      "out_of_range",
      OneTensor(R"({"dtype":"F32","shape":[8],"data_offsets":[0,32]})", kEightFloats.substr(0, 20)),
      Code::kDataLoss,
      {"tensor 't'", "data_offsets [0, 32]", "data section of 20 bytes", "truncated"});
  ExpectBadFile("overlap",
                Image(R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,20]},)"
                      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                      kEightFloats),
                Code::kInvalidArgument, {"'a' and 'b' overlap"});
  ExpectBadFile("same_range",
                Image(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                      R"("b":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})",
                      kEightFloats),
                Code::kInvalidArgument, {"overlap"});
  ExpectBadFile("gap",
                Image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                      kEightFloats),
                Code::kInvalidArgument, {"bytes [12, 16)", "between 'a' and 'b'", "fully indexed"});
  ExpectBadFile("gap_at_start", OneTensor(R"({"dtype":"F32","shape":[7],"data_offsets":[4,32]})"),
                Code::kInvalidArgument, {"bytes [0, 4)", "before 't'"});
  ExpectBadFile("trailing", OneTensor(R"({"dtype":"F32","shape":[6],"data_offsets":[0,24]})"),
                Code::kInvalidArgument,
                {"8 bytes after the last tensor", "'t' ends at 24", "fully indexed"});
  ExpectBadFile("data_without_tensors", Image("{}", kEightFloats), Code::kInvalidArgument,
                {"32 bytes after the last tensor", "lists none"});
}

// A valid file cut short on the disk: opening says truncated; a file cut after it was
// opened makes the read say so.
// Pages of `path` in the page cache, and all its pages.
std::pair<size_t, size_t> CachedPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  const size_t bytes = std::filesystem::file_size(path);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = (bytes + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  if (map == MAP_FAILED || ::mincore(map, bytes, resident.data()) != 0) return {pages, pages};
  ::munmap(map, bytes);
  size_t cached = 0;
  for (unsigned char flag : resident) cached += flag & 1;
  return {cached, pages};
}

// Large reads go around the page cache (O_DIRECT: a model is read once), with the same
// values as through it; where the file system refuses O_DIRECT the test says SKIPPED.
TEST(SafetensorsTest, LargeReadsBypassThePageCache) {
  const uint64_t numel = (uint64_t{3} << 20) + 5;  // 12 MiB of F32 after a small tensor
  const std::vector<float> small = Values(3);
  StOutputTensor big{"big", {static_cast<int64_t>(numel)}, [](uint64_t begin, uint64_t count,
                                                             float* out) {
                       for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<float>(begin + i);
                       return absl::OkStatus();
                     }};
  const std::string path = TempPath("direct.safetensors");
  ASSERT_OK(WriteSafetensors(path, {FromVector("a_small", {3}, &small), big}, StDType::kF32, {}));
  const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (probe < 0) GTEST_SKIP() << "SKIPPED: the file system of " << path << " refuses O_DIRECT";
  ::close(probe);
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  const auto [before, pages] = CachedPages(path);
  if (before > pages / 10) GTEST_SKIP() << "SKIPPED: the page cache keeps " << path;
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  const StTensor& tensor = *set.Find("big");
  std::vector<float> got(numel - 2);
  ASSERT_OK(set.ReadFloats(tensor, 1, numel - 2, got.data()));  // unaligned both ends
  for (uint64_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i + 1)) << i;
  // The view of the same elements, where the direct read landed (and after a shorter
  // read by the same thread: the view is of the latest read).
  ASSERT_OK_AND_ASSIGN(const float* view, set.ReadFloatsView(tensor, 3, numel - 4));
  for (uint64_t i = 0; i < numel - 4; ++i) ASSERT_EQ(view[i], static_cast<float>(i + 3)) << i;
  ASSERT_OK_AND_ASSIGN(view, set.ReadFloatsView(tensor, 1000, 70000));
  for (uint64_t i = 0; i < 70000; ++i) ASSERT_EQ(view[i], static_cast<float>(i + 1000)) << i;
  const auto [after, all] = CachedPages(path);
  EXPECT_LE(after, before + all / 10) << "the read went through the page cache";
  // A cut file: the direct read comes up short and the page-cache read says where it ends.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(std::filesystem::file_size(path) - 6)), 0);
  got.resize(numel);
  EXPECT_THAT(set.ReadFloats(tensor, 0, numel, got.data()),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("'big'"), HasSubstr("truncated"))));
  EXPECT_THAT(set.ReadFloatsView(tensor, 0, numel).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("'big'"), HasSubstr("truncated"))));
  ASSERT_OK(set.ReadFloats(tensor, 7, numel - 9, got.data()));  // ends before the cut
  for (uint64_t i = 0; i < numel - 9; ++i) ASSERT_EQ(got[i], static_cast<float>(i + 7)) << i;
}

// ReadFloatsView gives what ReadFloats gives, element for element, for every dtype, small
// reads (page cache) and large ones (O_DIRECT where the file system allows), and refuses a
// range outside the tensor as ReadFloats does.
TEST(SafetensorsTest, ReadFloatsViewMatchesReadFloats) {
  const uint64_t numel = 300000;  // 1.2 MB of F32, 600 KB of BF16/F16: above the direct size
  StOutputTensor big{"big", {static_cast<int64_t>(numel)}, [](uint64_t begin, uint64_t count,
                                                             float* out) {
                       for (uint64_t i = 0; i < count; ++i) {
                         out[i] = static_cast<float>((begin + i) % 1000) * 0.25f - 100.0f;
                       }
                       return absl::OkStatus();
                     }};
  const std::vector<float> small = Values(5);
  for (const StDType dtype : {StDType::kF32, StDType::kBF16, StDType::kF16}) {
    const std::string path =
        TempPath(absl::StrCat("view", static_cast<int>(dtype), ".safetensors"));
    ASSERT_OK(WriteSafetensors(path, {FromVector("a_small", {5}, &small), big}, dtype, {}));
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
    for (const auto& [name, begin, count] :
         {std::tuple<std::string, uint64_t, uint64_t>{"a_small", 1, 3}, {"big", 0, numel},
          {"big", 17, numel - 40}, {"big", 5, 9}}) {
      const StTensor& tensor = *set.Find(name);
      std::vector<float> want(count);
      ASSERT_OK(set.ReadFloats(tensor, begin, count, want.data()));
      ASSERT_OK_AND_ASSIGN(const float* view, set.ReadFloatsView(tensor, begin, count));
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_EQ(view[i], want[i]) << name << " [" << begin << ", +" << count << ") element " << i;
      }
    }
    EXPECT_THAT(set.ReadFloatsView(*set.Find("big"), numel - 2, 3).status(),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'big'")));
  }
}

TEST(SafetensorsTest, TruncatedFiles) {
  const std::vector<float> values = Values(64);
  const std::string path = TempPath("truncated.safetensors");
  ASSERT_OK(WriteSafetensors(path, {FromVector("w", {8, 8}, &values)}, StDType::kF32, {}));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(path));
  const uint64_t size = std::filesystem::file_size(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size - 10)), 0);
  EXPECT_THAT(SafetensorsSet::OpenFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("truncated"),
                             HasSubstr(absl::StrCat("it has ", size - 10, " bytes")),
                             HasSubstr(absl::StrCat("needs ", size)))));
  std::vector<float> out(64);
  EXPECT_OK(set.ReadFloats(*set.Find("w"), 0, 60, out.data()));  // before the cut
  EXPECT_THAT(set.ReadFloats(*set.Find("w"), 0, 64, out.data()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("truncated"))));
  ASSERT_EQ(::truncate(path.c_str(), 4), 0);
  EXPECT_THAT(SafetensorsSet::OpenFile(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("4 bytes")));
}

// ---- malformed sharded sets ----

// A directory with the given index text and shard images.
std::string ShardedDir(const std::string& name, const std::string& index,
                       const std::map<std::string, std::string>& shards) {
  const std::string dir = FreshDir(name);
  std::filesystem::create_directories(dir);
  if (!index.empty()) WriteFile(dir + "/model.safetensors.index.json", index);
  for (const auto& [file, image] : shards) WriteFile(dir + "/" + file, image);
  return dir;
}

std::string Shard(const std::vector<std::string>& names) {
  std::string header = "{";
  std::string data;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"", names[i],
                    "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[", 8 * i, ",", 8 * i + 8,
                    "]}");
    data += Bytes(std::vector<float>{static_cast<float>(i), -static_cast<float>(i)});
  }
  return Image(header + "}", data);
}

void ExpectBadDir(const std::string& dir, absl::StatusCode code,
                  const std::vector<std::string>& fragments) {
  SCOPED_TRACE(dir);
  const StatusOr<SafetensorsSet> opened = SafetensorsSet::OpenDirectory(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), code) << opened.status();
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(opened.status().message()), HasSubstr(fragment));
  }
}

TEST(SafetensorsTest, RejectsBadShardedSets) {
  using Code = absl::StatusCode;
  const std::string index_name = "model.safetensors.index.json";
  const std::map<std::string, std::string> good_shards = {{"s1.safetensors", Shard({"a", "b"})},
                                                          {"s2.safetensors", Shard({"c"})}};
  const std::string good_index =
      R"({"metadata":{"total_size":24},"weight_map":{"a":"s1.safetensors",)"
      R"("b":"s1.safetensors","c":"s2.safetensors"}})";
  {
    const std::string dir = ShardedDir("set_good", good_index, good_shards);
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
    EXPECT_EQ(set.tensors().size(), 3u);
    EXPECT_THAT(ReadAll(set, "b"), ElementsAre(1.0f, -1.0f));
    EXPECT_EQ(set.Find("c")->file, dir + "/s2.safetensors");
  }
  ExpectBadDir(ShardedDir("set_not_json", "{\"weight_map\": ", good_shards), Code::kInvalidArgument,
               {index_name, "not valid UTF-8 JSON"});
  ExpectBadDir(ShardedDir("set_no_map", R"({"metadata":{}})", good_shards), Code::kInvalidArgument,
               {index_name, "\"weight_map\""});
  ExpectBadDir(ShardedDir("set_map_array", R"({"weight_map":["a"]})", good_shards),
               Code::kInvalidArgument, {index_name, "\"weight_map\""});
  ExpectBadDir(ShardedDir("set_escape", R"({"weight_map":{"a":"../s1.safetensors"}})", good_shards),
               Code::kInvalidArgument, {index_name, "'a'", "not a file name in the directory"});
  ExpectBadDir(ShardedDir("set_missing_shard",
                          R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",)"
                          R"("c":"s3.safetensors"}})",
                          good_shards),
               Code::kDataLoss, {index_name, "shard s3.safetensors", "'c'", "missing"});
  ExpectBadDir(ShardedDir("set_not_in_shard",
                          R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",)"
                          R"("c":"s2.safetensors","d":"s2.safetensors"}})",
                          good_shards),
               Code::kInvalidArgument,
               {index_name, "tensor 'd' in s2.safetensors, which does not hold it"});
  ExpectBadDir(ShardedDir("set_wrong_shard",
                          R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors",)"
                          R"("c":"s2.safetensors"}})",
                          good_shards),
               Code::kInvalidArgument,
               {index_name, "tensor 'b' in s2.safetensors, which does not hold it",
                "(s1.safetensors does)"});
  ExpectBadDir(
      ShardedDir("set_not_in_index",
                 R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})", good_shards),
      Code::kInvalidArgument, {index_name, "s1.safetensors holds tensor 'b'", "weight_map lacks"});
  ExpectBadDir(
      ShardedDir("set_two_shards", good_index,
                 {{"s1.safetensors", Shard({"a", "b"})}, {"s2.safetensors", Shard({"c", "b"})}}),
      Code::kInvalidArgument,
      {index_name, "tensor 'b' is in two shards: s1.safetensors and s2.safetensors"});
  ExpectBadDir(
      ShardedDir("set_duplicate_key",
                 R"({"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}})", good_shards),
      Code::kInvalidArgument, {index_name, "'a' appears twice"});
  // A broken shard: its own error, naming it.
  ExpectBadDir(ShardedDir("set_bad_shard", good_index,
                          {{"s1.safetensors", Shard({"a", "b"})},
                           {"s2.safetensors", Shard({"c"}).substr(0, 30)}}),
               Code::kDataLoss, {"s2.safetensors", "truncated"});
  {
    std::map<std::string, std::string> both = good_shards;
    both["model.safetensors"] = Shard({"a"});
    ExpectBadDir(ShardedDir("set_both", good_index, both), Code::kInvalidArgument,
                 {"both model.safetensors and model.safetensors.index.json", "stale"});
  }
}

}  // namespace
}  // namespace strata
