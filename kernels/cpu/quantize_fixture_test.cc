// The C++ quantization against the independent numpy reference of docs/quantization.md
// (tools/quant_reference.py, which wrote kernels/cpu/testdata/quant/; //tools:
// quant_reference_test keeps those files equal to what the script writes now): the dynamic
// maps and NF4 values exactly, every case's pieces byte for byte (codes, absmaxes, absmax2,
// offset and the zeroed alignment gaps), and the dequantized values bit for bit, from the
// host reference (DequantizePiece) and the fast decoders, fp32 and bf16.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/quant_format.h"
#include "kernels/cpu/fixture_files.h"
#include "kernels/cpu/quantize.h"

namespace strata::cpu {
namespace {

const char* kDir = "kernels/cpu/testdata/quant/";

std::vector<uint8_t> ReadBytes(const std::string& name) { return ReadFixtureBytes(kDir + name); }
std::vector<float> ReadFloats(const std::string& name) { return ReadFixture<float>(kDir + name); }

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  if (list == "-") return out;
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, ',')) out.push_back(item);
  return out;
}

BaseDType Format(const std::string& name) {
  if (name == "nf4") return BaseDType::kNF4;
  if (name == "int8") return BaseDType::kInt8;
  EXPECT_EQ(name, "bf16");
  return BaseDType::kBF16;
}

TEST(QuantizeFixtureTest, TablesMatchThePythonReference) {
  const std::vector<float> maps = ReadFloats("maps.f32");
  ASSERT_EQ(maps.size(), 256u + 256 + 16);
  ExpectSameFloats(std::vector<float>(maps.begin(), maps.begin() + 256),
                   std::vector<float>(DynamicMap(true).begin(), DynamicMap(true).end()),
                   "signed dynamic map");
  ExpectSameFloats(std::vector<float>(maps.begin() + 256, maps.begin() + 512),
                   std::vector<float>(DynamicMap(false).begin(), DynamicMap(false).end()),
                   "unsigned dynamic map");
  ExpectSameFloats(std::vector<float>(maps.begin() + 512, maps.end()),
                   std::vector<float>(Nf4Values().begin(), Nf4Values().end()), "NF4 values");
}

TEST(QuantizeFixtureTest, PiecesAndValuesMatchThePythonReference) {
  std::ifstream cases(std::string(kDir) + "cases.txt");
  ASSERT_TRUE(cases.good());
  std::string name, full, piece_only;
  size_t n = 0;
  int count = 0;
  while (cases >> name >> n >> full >> piece_only) {
    ++count;
    const std::vector<float> x = ReadFloats(name + ".input.f32");
    ASSERT_EQ(x.size(), n) << name;
    std::vector<std::string> formats = Split(full);
    const size_t with_values = formats.size();
    for (const std::string& format : Split(piece_only)) formats.push_back(format);
    for (size_t f = 0; f < formats.size(); ++f) {
      const std::string what = name + "." + formats[f];
      SCOPED_TRACE(what);
      const BaseDType dtype = Format(formats[f]);
      std::vector<uint8_t> piece(PieceLayout(dtype, n).bytes, 0xee);
      ASSERT_TRUE(QuantizePiece(dtype, x.data(), n, piece.data()).ok());
      const std::vector<uint8_t> want_piece = ReadBytes(what + ".piece");
      ASSERT_EQ(piece.size(), want_piece.size());
      for (size_t i = 0; i < piece.size(); ++i) {
        ASSERT_EQ(piece[i], want_piece[i]) << "piece byte " << i;
      }
      if (f >= with_values) continue;
      const std::vector<float> want = ReadFloats(what + ".f32");
      std::vector<float> values(n);
      DequantizePiece(dtype, piece.data(), n, values.data());
      ExpectSameFloats(values, want, what + " DequantizePiece");
      // The fast decoders, fp32 and bf16 (the latter the fixture's values rounded once).
      const QuantPiece layout = PieceLayout(dtype, n);
      const uint8_t* p = piece.data();
      std::vector<float> fast(n);
      std::vector<bf16> fast_bf16(n);
      if (dtype == BaseDType::kNF4) {
        const float* absmax2 = reinterpret_cast<const float*>(p + layout.absmax2);
        const float offset = *reinterpret_cast<const float*>(p + layout.offset);
        DequantizeNf4(fast.data(), p + layout.codes, p + layout.absmax, absmax2, offset, n);
        DequantizeNf4(fast_bf16.data(), p + layout.codes, p + layout.absmax, absmax2, offset, n);
      } else if (dtype == BaseDType::kInt8) {
        const int8_t* codes = reinterpret_cast<const int8_t*>(p + layout.codes);
        const float* absmax = reinterpret_cast<const float*>(p + layout.absmax);
        DequantizeInt8(fast.data(), codes, absmax, n);
        DequantizeInt8(fast_bf16.data(), codes, absmax, n);
      } else {
        const bf16* in = reinterpret_cast<const bf16*>(p + layout.codes);
        WidenBf16(fast.data(), in, n);
        WidenBf16(fast_bf16.data(), in, n);
      }
      ExpectSameFloats(fast, want, what + " fast fp32");
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(fast_bf16[i].bits, ToBf16(want[i]).bits) << what << " fast bf16, element " << i;
      }
    }
  }
  EXPECT_EQ(count, 4) << "cases.txt lists the cases of tools/quant_reference.py";
}

}  // namespace
}  // namespace strata::cpu
