// Test scaffolding shared by the kernels/cpu tests (testonly): seeded random test vectors,
// conversion of fp32 test vectors to and from the storage types (float, bf16), the elementwise
// check |got - ref| <= atol + rtol * |ref| that names the first mismatches, central finite
// differences of a scalar loss, and the typed-test base that runs kernels on an odd number of
// OpenMP threads.
//
// The random helpers are deterministic: a seed gives the same values on every run built with
// the same standard library. The checks report through gtest, so call them from the test's own
// thread.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata::cpu {

// n values uniform in [low, high) from std::mt19937(seed).
std::vector<float> RandomFloats(size_t n, float low, float high, uint32_t seed);

// n token ids (inputs or targets) uniform in [0, vocab_size) from std::mt19937(seed).
std::vector<int32_t> RandomTokens(size_t n, int vocab_size, uint32_t seed);

// `values` rounded to the storage type T (float or bf16) with strata::Store.
template <typename T>
std::vector<T> ToStorage(const std::vector<float>& values) {
  std::vector<T> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) Store(&out[i], values[i]);
  return out;
}

// The first n stored values as fp32 (exact for float and bf16).
template <typename T>
std::vector<float> ToFloats(const T* values, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = Load(values + i);
  return out;
}

template <typename T>
std::vector<float> ToFloats(const std::vector<T>& values) {
  return ToFloats(values.data(), values.size());
}

// Expects |got[i] - ref[i]| <= atol + rtol * |ref[i]| for every i (and equal sizes); reports
// the first five mismatches, each with its index and limit, then their count, all prefixed by
// `what`. The float overload computes the limit and the difference in fp32, the double one in
// fp64 (for tolerances near fp32's resolution, as AdamW's moments need); mixing the two types
// in one call does not compile.
void ExpectAllClose(const std::vector<float>& got, const std::vector<float>& ref, float atol,
                    float rtol, const std::string& what);
void ExpectAllClose(const std::vector<float>& got, const std::vector<float>& ref, double atol,
                    double rtol, const std::string& what);

// Central differences (loss(x + eps) - loss(x - eps)) / (2 eps) of `loss` with respect to each
// element x of `values`, which `loss` must read; each element is restored after its two calls.
std::vector<float> NumericGradient(std::vector<float>& values, float eps,
                                   const std::function<double()>& loss);

// The storage types every kernel is tested with.
using StorageTypes = ::testing::Types<float, bf16>;

// Base of the typed kernel tests: each test starts with 3 OpenMP threads, an odd count, so
// that work does not split evenly. Derive a class template from it for TYPED_TEST_SUITE.
class OddThreadCountTest : public ::testing::Test {
 protected:
  void SetUp() override;
};

}  // namespace strata::cpu
