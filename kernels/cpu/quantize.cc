// Blockwise quantization (quantize.h): references as plain loops over the specification of
// docs/quantization.md, fast versions that run chunks of blocks on OpenMP threads, each chunk
// a span function the compiler vectorises for the ISA chosen at load time. Each fast version
// does the same fp32 operations in the same order per element as its reference (a code is a
// count of comparisons, a decoded value one product from a per-block 16-entry table), so the
// two agree bit for bit; -ffp-contract=off (BUILD) keeps that true in the FMA-capable clones.
// Thread-safety: see quantize.h.
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/elementwise.h"  // STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

constexpr size_t kBlock = kQuantBlock;
constexpr uint8_t kNf4Zero = 7;          // Nf4Values()[7] == 0.0f
constexpr uint8_t kSignedMapZero = 127;  // DynamicMap(true)[127] == 0.0f
// Blocks per parallel work item (16384 values).
constexpr size_t kChunkBlocks = 256;

size_t NumBlocks(size_t n) { return (n + kBlock - 1) / kBlock; }

// Runs span(first_block, end_block) over [0, blocks) in chunks, in parallel when there is more
// than one.
template <typename SpanFn>
void ForEachBlockChunk(size_t blocks, SpanFn span) {
  const size_t num_chunks = (blocks + kChunkBlocks - 1) / kChunkBlocks;
#pragma omp parallel for schedule(static) if (num_chunks > 1)
  for (size_t chunk = 0; chunk < num_chunks; ++chunk) {
    const size_t begin = chunk * kChunkBlocks;
    span(begin, std::min(blocks, begin + kChunkBlocks));
  }
}

template <size_t N>
std::array<float, N - 1> Midpoints(const std::array<float, N>& values) {
  std::array<float, N - 1> midpoints;
  for (size_t i = 0; i + 1 < N; ++i) {
    midpoints[i] = static_cast<float>(
        (static_cast<double>(values[i]) + static_cast<double>(values[i + 1])) / 2.0);
  }
  return midpoints;
}

// The code of y: how many decision points lie strictly below it.
template <size_t N>
inline uint8_t CodeOf(float y, const std::array<float, N>& midpoints) {
  uint32_t code = 0;
  for (size_t i = 0; i < N; ++i) code += y > midpoints[i] ? 1u : 0u;
  return static_cast<uint8_t>(code);
}

// The stored absmax of a block's largest magnitude (quantize.h).
inline float FlushAbsmax(float max_abs) { return max_abs < kQuantMinAbsmax ? 0.0f : max_abs; }

// One block's decoded absmax a' (fp32 product, then fp32 sum).
inline float DecodedAbsmax(const uint8_t* absmax_codes, const float* absmax2, float offset,
                           size_t block) {
  const float scaled = DynamicMap(true)[absmax_codes[block]] * absmax2[block / kAbsmaxGroup];
  return scaled + offset;
}

STRATA_CPU_SIMD_CLONES void BlockAbsmaxSpan(const float* x, size_t n, float* absmax, size_t first,
                                            size_t end) {
  for (size_t b = first; b < end; ++b) {
    const size_t begin = b * kBlock, stop = std::min(n, begin + kBlock);
    // The largest |x| as the largest sign-cleared bit pattern: for finite values the integer
    // order of those patterns is the order of the magnitudes, and an integer max reduction
    // vectorises (a float one would need -ffinite-math-only -fno-signed-zeros).
    uint32_t max_bits = 0;
    for (size_t i = begin; i < stop; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof(bits));
      bits &= 0x7fffffffu;
      max_bits = max_bits > bits ? max_bits : bits;
    }
    float max_abs;
    std::memcpy(&max_abs, &max_bits, sizeof(max_abs));
    absmax[b] = FlushAbsmax(max_abs);
  }
}

STRATA_CPU_SIMD_CLONES void EncodeNf4Span(const float* x, size_t n, const float* absmax,
                                          uint8_t* codes, size_t first, size_t end) {
  const std::array<float, 15>& midpoints = Nf4Midpoints();
  for (size_t b = first; b < end; ++b) {
    const size_t begin = b * kBlock, count = std::min(n, begin + kBlock) - begin;
    uint8_t block_codes[kBlock];
    if (absmax[b] == 0.0f) {
      std::fill(block_codes, block_codes + kBlock, kNf4Zero);
    } else {
      const float reciprocal = 1.0f / absmax[b];
      for (size_t i = 0; i < kBlock; ++i) {
        const float y = i < count ? x[begin + i] * reciprocal : 0.0f;
        block_codes[i] = CodeOf(y, midpoints);
      }
    }
    for (size_t i = 0; i < kBlock / 2; ++i) {
      codes[b * (kBlock / 2) + i] =
          static_cast<uint8_t>((block_codes[2 * i] << 4) | block_codes[2 * i + 1]);
    }
  }
}

STRATA_CPU_SIMD_CLONES void EncodeInt8Span(const float* x, size_t n, const float* absmax,
                                           int8_t* codes, size_t first, size_t end) {
  for (size_t b = first; b < end; ++b) {
    const size_t begin = b * kBlock, count = std::min(n, begin + kBlock) - begin;
    int8_t* out = codes + b * kBlock;
    if (absmax[b] == 0.0f) {
      std::fill(out, out + kBlock, int8_t{0});
      continue;
    }
    const float scale = 127.0f / absmax[b];
    for (size_t i = 0; i < kBlock; ++i) {
      // nearbyintf rounds half to even in the default rounding mode, as lrintf does, and
      // vectorises; the clamp keeps the product's rounding above 127 in range.
      const float rounded = i < count ? std::nearbyint(x[begin + i] * scale) : 0.0f;
      out[i] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, rounded)));
    }
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void DequantizeNf4Span(T* out, const uint8_t* codes,
                                              const uint8_t* absmax_codes, const float* absmax2,
                                              float offset, size_t n, size_t first, size_t end) {
  const std::array<float, 16>& values = Nf4Values();
  for (size_t b = first; b < end; ++b) {
    const float scale = DecodedAbsmax(absmax_codes, absmax2, offset, b);
    // The block's 16 possible outputs, each the one product (and rounding) of the reference.
    T table[16];
    for (int k = 0; k < 16; ++k) Store(&table[k], values[k] * scale);
    const size_t begin = b * kBlock, count = std::min(n, begin + kBlock) - begin;
    const uint8_t* block_codes = codes + b * (kBlock / 2);
    T* block_out = out + begin;
    if (count == kBlock) {
      for (size_t i = 0; i < kBlock / 2; ++i) {
        block_out[2 * i] = table[block_codes[i] >> 4];
        block_out[2 * i + 1] = table[block_codes[i] & 15];
      }
    } else {
      for (size_t i = 0; i < count; ++i) {
        const uint8_t byte = block_codes[i / 2];
        block_out[i] = table[i % 2 == 0 ? byte >> 4 : byte & 15];
      }
    }
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void DequantizeInt8Span(T* out, const int8_t* codes, const float* absmax,
                                               size_t n, size_t first, size_t end) {
  for (size_t b = first; b < end; ++b) {
    const float scale = absmax[b] / 127.0f;
    const size_t begin = b * kBlock, stop = std::min(n, begin + kBlock);
    for (size_t i = begin; i < stop; ++i) Store(out + i, static_cast<float>(codes[i]) * scale);
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void WidenBf16Span(T* out, const bf16* in, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) Store(out + i, ToFloat(in[i]));
}

template <typename P>
P* At(uint8_t* piece, size_t offset) {
  return reinterpret_cast<P*>(piece + offset);
}
template <typename P>
const P* At(const uint8_t* piece, size_t offset) {
  return reinterpret_cast<const P*>(piece + offset);
}

}  // namespace

const std::array<float, 15>& Nf4Midpoints() {
  static const std::array<float, 15> kMidpoints = Midpoints(Nf4Values());
  return kMidpoints;
}

const std::array<float, 255>& DynamicMapMidpoints(bool is_signed) {
  static const std::array<float, 255> kSigned = Midpoints(DynamicMap(true));
  static const std::array<float, 255> kUnsigned = Midpoints(DynamicMap(false));
  return is_signed ? kSigned : kUnsigned;
}

void BlockAbsmaxReference(const float* x, size_t n, float* absmax) {
  for (size_t b = 0; b < NumBlocks(n); ++b) {
    float max_abs = 0.0f;
    for (size_t i = b * kBlock; i < n && i < (b + 1) * kBlock; ++i) {
      if (std::fabs(x[i]) > max_abs) max_abs = std::fabs(x[i]);
    }
    absmax[b] = FlushAbsmax(max_abs);
  }
}

void BlockAbsmax(const float* x, size_t n, float* absmax) {
  ForEachBlockChunk(NumBlocks(n),
                    [&](size_t first, size_t end) { BlockAbsmaxSpan(x, n, absmax, first, end); });
}

void QuantizeAbsmaxes(const float* absmax, size_t blocks, uint8_t* codes, float* absmax2,
                      float* offset) {
  double sum = 0.0;
  for (size_t b = 0; b < blocks; ++b) sum += absmax[b];
  const float mean = blocks == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(blocks));
  *offset = mean;
  const std::array<float, 255>& midpoints = DynamicMapMidpoints(true);
  for (size_t group_begin = 0; group_begin < blocks; group_begin += kAbsmaxGroup) {
    const size_t group_end = std::min(blocks, group_begin + kAbsmaxGroup);
    float max_abs = 0.0f;
    for (size_t b = group_begin; b < group_end; ++b) {
      max_abs = std::max(max_abs, std::fabs(absmax[b] - mean));
    }
    max_abs = FlushAbsmax(max_abs);
    absmax2[group_begin / kAbsmaxGroup] = max_abs;
    const float reciprocal = max_abs == 0.0f ? 0.0f : 1.0f / max_abs;
    for (size_t b = group_begin; b < group_end; ++b) {
      codes[b] =
          max_abs == 0.0f ? kSignedMapZero : CodeOf((absmax[b] - mean) * reciprocal, midpoints);
    }
  }
}

void DequantizeAbsmaxes(const uint8_t* codes, const float* absmax2, float offset, size_t blocks,
                        float* out) {
  for (size_t b = 0; b < blocks; ++b) out[b] = DecodedAbsmax(codes, absmax2, offset, b);
}

void EncodeNf4Reference(const float* x, size_t n, const float* absmax, uint8_t* codes) {
  const std::array<float, 15>& midpoints = Nf4Midpoints();
  for (size_t i = 0; i < NumBlocks(n) * kBlock; ++i) {
    const size_t b = i / kBlock;
    uint8_t code = kNf4Zero;
    if (absmax[b] != 0.0f) {
      const float y = i < n ? x[i] * (1.0f / absmax[b]) : 0.0f;
      code = CodeOf(y, midpoints);
    }
    uint8_t& byte = codes[i / 2];
    byte =
        i % 2 == 0 ? static_cast<uint8_t>(code << 4) : static_cast<uint8_t>((byte & 0xf0) | code);
  }
}

void EncodeNf4(const float* x, size_t n, const float* absmax, uint8_t* codes) {
  ForEachBlockChunk(NumBlocks(n), [&](size_t first, size_t end) {
    EncodeNf4Span(x, n, absmax, codes, first, end);
  });
}

void EncodeInt8Reference(const float* x, size_t n, const float* absmax, int8_t* codes) {
  for (size_t i = 0; i < NumBlocks(n) * kBlock; ++i) {
    const size_t b = i / kBlock;
    long code = 0;
    if (absmax[b] != 0.0f && i < n) code = lrintf(x[i] * (127.0f / absmax[b]));
    codes[i] = static_cast<int8_t>(std::clamp(code, -127L, 127L));
  }
}

void EncodeInt8(const float* x, size_t n, const float* absmax, int8_t* codes) {
  ForEachBlockChunk(NumBlocks(n), [&](size_t first, size_t end) {
    EncodeInt8Span(x, n, absmax, codes, first, end);
  });
}

template <typename T>
void DequantizeNf4Reference(T* out, const uint8_t* codes, const uint8_t* absmax_codes,
                            const float* absmax2, float offset, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float scale = DecodedAbsmax(absmax_codes, absmax2, offset, i / kBlock);
    const uint8_t code = i % 2 == 0 ? codes[i / 2] >> 4 : codes[i / 2] & 15;
    Store(out + i, Nf4Values()[code] * scale);
  }
}

template <typename T>
void DequantizeNf4(T* out, const uint8_t* codes, const uint8_t* absmax_codes, const float* absmax2,
                   float offset, size_t n) {
  ForEachBlockChunk(NumBlocks(n), [&](size_t first, size_t end) {
    DequantizeNf4Span(out, codes, absmax_codes, absmax2, offset, n, first, end);
  });
}

template <typename T>
void DequantizeInt8Reference(T* out, const int8_t* codes, const float* absmax, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Store(out + i, static_cast<float>(codes[i]) * (absmax[i / kBlock] / 127.0f));
  }
}

template <typename T>
void DequantizeInt8(T* out, const int8_t* codes, const float* absmax, size_t n) {
  ForEachBlockChunk(NumBlocks(n), [&](size_t first, size_t end) {
    DequantizeInt8Span(out, codes, absmax, n, first, end);
  });
}

template <typename T>
void WidenBf16Reference(T* out, const bf16* in, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(out + i, ToFloat(in[i]));
}

template <typename T>
void WidenBf16(T* out, const bf16* in, size_t n) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (n > 0) std::memcpy(out, in, n * sizeof(bf16));
  } else {
    ForEachBlockChunk(NumBlocks(n), [&](size_t first, size_t end) {
      WidenBf16Span(out, in, first * kBlock, std::min(n, end * kBlock));
    });
  }
}

Status QuantizePiece(BaseDType dtype, const float* x, size_t n, uint8_t* piece) {
  if (dtype == BaseDType::kTrain) {
    return absl::InvalidArgumentError(
        "QuantizePiece: base dtype 'train' stores the values unquantized; nothing to encode");
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat("QuantizePiece (", BaseDTypeName(dtype),
                                                     "): value ", i, " of ", n, " is ", x[i],
                                                     "; only finite values can be quantized"));
    }
  }
  const QuantPiece layout = PieceLayout(dtype, n);
  std::memset(piece, 0, layout.bytes);
  switch (dtype) {
    case BaseDType::kTrain:
      break;
    case BaseDType::kBF16:
      CastFromFloat(At<bf16>(piece, layout.codes), x, n);
      break;
    case BaseDType::kInt8: {
      float* absmax = At<float>(piece, layout.absmax);
      BlockAbsmax(x, n, absmax);
      EncodeInt8(x, n, absmax, At<int8_t>(piece, layout.codes));
      break;
    }
    case BaseDType::kNF4: {
      // The fp32 absmaxes are only needed while encoding: the piece stores their codes.
      std::vector<float> absmax(layout.blocks);
      BlockAbsmax(x, n, absmax.data());
      QuantizeAbsmaxes(absmax.data(), layout.blocks, At<uint8_t>(piece, layout.absmax),
                       At<float>(piece, layout.absmax2), At<float>(piece, layout.offset));
      EncodeNf4(x, n, absmax.data(), At<uint8_t>(piece, layout.codes));
      break;
    }
  }
  return absl::OkStatus();
}

void DequantizePiece(BaseDType dtype, const uint8_t* piece, size_t n, float* out) {
  const QuantPiece layout = PieceLayout(dtype, n);
  switch (dtype) {
    case BaseDType::kTrain:
      break;
    case BaseDType::kBF16:
      WidenBf16Reference(out, At<bf16>(piece, layout.codes), n);
      break;
    case BaseDType::kInt8:
      DequantizeInt8Reference(out, At<int8_t>(piece, layout.codes), At<float>(piece, layout.absmax),
                              n);
      break;
    case BaseDType::kNF4:
      DequantizeNf4Reference(out, At<uint8_t>(piece, layout.codes),
                             At<uint8_t>(piece, layout.absmax), At<float>(piece, layout.absmax2),
                             *At<float>(piece, layout.offset), n);
      break;
  }
}

#define STRATA_QUANTIZE_INSTANTIATE(T)                                                             \
  template void DequantizeNf4Reference<T>(T*, const uint8_t*, const uint8_t*, const float*, float, \
                                          size_t);                                                 \
  template void DequantizeNf4<T>(T*, const uint8_t*, const uint8_t*, const float*, float, size_t); \
  template void DequantizeInt8Reference<T>(T*, const int8_t*, const float*, size_t);               \
  template void DequantizeInt8<T>(T*, const int8_t*, const float*, size_t);                        \
  template void WidenBf16Reference<T>(T*, const bf16*, size_t);                                    \
  template void WidenBf16<T>(T*, const bf16*, size_t);
STRATA_QUANTIZE_INSTANTIATE(float)
STRATA_QUANTIZE_INSTANTIATE(bf16)
#undef STRATA_QUANTIZE_INSTANTIATE

}  // namespace strata::cpu
