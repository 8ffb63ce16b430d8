// The element types of safetensors files and where one tensor lies in a file: StDType (F32,
// BF16, F16) with its header name and width, the IEEE binary16 conversions, and StTensor,
// what the reader (safetensors.h) knows of each tensor once its header entry is checked.
// Part of safetensors.h's API (it includes this header); see there for the format.
// Invariants: the header names and widths are the format's; the conversions are exact where
// exactness is possible (see each). Little-endian hosts only: every component of the
// library uses the on-disk bytes in place, so the build fails on a big-endian one.
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// The header length and the elements are little-endian on disk and are used in place.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "models/hf/safetensors supports little-endian hosts only"
#endif

namespace strata {

enum class StDType { kF32, kBF16, kF16 };

// The header's name of the dtype: "F32", "BF16", "F16".
const char* StDTypeName(StDType dtype);
// Bytes per element: 4 or 2.
size_t StDTypeBytes(StDType dtype);

// IEEE binary16 conversions. HalfToFloat is exact (subnormals, infinities, NaN payloads);
// FloatToHalf rounds to nearest even, overflows to infinity, keeps NaN a (quiet) NaN.
float HalfToFloat(uint16_t half_bits);
uint16_t FloatToHalf(float value);

struct StTensor {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  std::string file;     // path of the file holding it
  uint64_t offset = 0;  // absolute byte offset of its data in that file
  uint64_t bytes = 0;   // numel * StDTypeBytes(dtype)
};

}  // namespace strata
