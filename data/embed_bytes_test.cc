// Tests the embed_bytes tool through its output: testdata/all_bytes.bin (all 256 byte values
// in order, then "\x01" "7??=\"\\" "\0" "0\x1f" "9") compiled in by a genrule must equal the
// file read at test time, byte for byte, NULs and escape hazards included.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace strata {
std::string_view AllBytesForTest();  // defined by the generated all_bytes.cc
namespace {

TEST(EmbedBytes, EmbedsEveryByteExactly) {
  std::ifstream file("data/testdata/all_bytes.bin", std::ios::binary);
  ASSERT_TRUE(file.good()) << "runfile data/testdata/all_bytes.bin is missing";
  const std::string expected((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  ASSERT_EQ(expected.size(), 256u + 11u);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(static_cast<unsigned char>(expected[i]), i);
  const std::string_view embedded = AllBytesForTest();
  EXPECT_EQ(embedded, std::string_view(expected));
}

}  // namespace
}  // namespace strata
