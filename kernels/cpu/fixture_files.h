// Test support for the fixture tests of kernels/cpu (quantize_fixture_test,
// adam8bit_fixture_test): reading the little-endian arrays an independent reference wrote
// (tools/*_reference.py) and comparing floats bit for bit.
// Thread-safety: plain functions.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace strata::cpu {

// The bytes of `path` (relative to the test's runfiles root); a missing file fails the test.
inline std::vector<uint8_t> ReadFixtureBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The file as an array of T (little-endian host).
template <typename T>
std::vector<T> ReadFixture(const std::string& path) {
  const std::vector<uint8_t> bytes = ReadFixtureBytes(path);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// Bits, so that -0.0 and 0.0 differ and the message shows both values.
inline void ExpectSameFloats(const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << ", element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

}  // namespace strata::cpu
