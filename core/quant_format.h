// The stored formats of a frozen base's matrices (lora.base_dtype) and what each piece of
// one weighs. A "piece" is what is quantized as a whole: one Hugging Face matrix (a fused
// matrix of strata's, such as LLaMA's q|k|v, is several pieces, one per row range), padded
// with zeros up to whole blocks. docs/quantization.md is the specification (the NF4 values,
// the dynamic map, the rounding, the nibble order); kernels/ implements it.
//   nf4   4-bit NormalFloat (QLoRA): 2 codes per byte, element 2i in the high nibble; an
//         absmax per block of kQuantBlock, itself quantized to 8 bits with the signed
//         dynamic map after subtracting the piece's mean absmax (the offset), in groups of
//         kAbsmaxGroup blocks with an fp32 absmax each ("double quantization").
//   int8  symmetric blockwise absmax: one int8 code per element (-127..127), an fp32 absmax
//         per block of kQuantBlock.
//   bf16  the values rounded to bf16 (a base half the size of an fp32 run's).
// Byte layout of a piece: its arrays in the order above, each starting on a
// kQuantArrayAlign boundary (PieceSizes gives the offsets).
// Thread-safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

// What a frozen base's matrices are stored as: kTrain = as the trainable params
// (train.dtype), no quantization.
enum class BaseDType { kTrain, kBF16, kInt8, kNF4 };

inline constexpr size_t kQuantBlock = 64;
inline constexpr size_t kAbsmaxGroup = 256;
inline constexpr size_t kQuantArrayAlign = 16;
// A block absmax (and a group's absmax2) below this is stored as 0: the block is all zeros
// after quantization. It keeps every reciprocal and scale of the encoding finite (1/absmax,
// 127/absmax); real weights are never this small (2^-120 is about 7.5e-37).
inline constexpr float kQuantMinAbsmax = 0x1p-120f;

// 8-bit Adam states (train.optimizer_states = int8; docs/quantization.md "8-bit Adam
// states"): m and v stored as one code per element (m: signed dynamic map, v: unsigned) and
// an fp32 absmax per block of kAdamStateBlock elements, the blocks fixed in the unit's
// element coordinates (block b holds elements [2048 b, 2048 b + 2048)), so a shard that
// starts on a multiple of 2048 owns whole blocks. A tensor of fewer than
// kAdamStateMinElements elements keeps fp32 moments (as bitsandbytes does).
inline constexpr size_t kAdamStateBlock = 2048;
inline constexpr size_t kAdamStateMinElements = 4096;

inline const char* BaseDTypeName(BaseDType dtype) {
  switch (dtype) {
    case BaseDType::kTrain: return "train";
    case BaseDType::kBF16: return "bf16";
    case BaseDType::kInt8: return "int8";
    case BaseDType::kNF4: return "nf4";
  }
  return "?";
}

inline StatusOr<BaseDType> ParseBaseDType(const std::string& name) {
  if (name == "train") return BaseDType::kTrain;
  if (name == "bf16") return BaseDType::kBF16;
  if (name == "int8") return BaseDType::kInt8;
  if (name == "nf4") return BaseDType::kNF4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown base dtype '", name, "' (expected train, bf16, int8 or nf4)"));
}

inline constexpr size_t AlignQuant(size_t bytes) {
  return (bytes + kQuantArrayAlign - 1) / kQuantArrayAlign * kQuantArrayAlign;
}

// The arrays of one piece of `elements` values: byte offsets from the piece's start (each
// kQuantArrayAlign-aligned) and sizes. Arrays a format lacks have 0 bytes.
struct QuantPiece {
  size_t elements = 0;      // the piece's real values
  size_t blocks = 0;        // ceil(elements / kQuantBlock) (nf4, int8)
  size_t groups = 0;        // ceil(blocks / kAbsmaxGroup) (nf4)
  size_t codes = 0, code_bytes = 0;              // nf4: blocks*32; int8: blocks*64; bf16: 2*elements
  size_t absmax = 0, absmax_bytes = 0;           // nf4: blocks (uint8 codes); int8: 4*blocks (fp32)
  size_t absmax2 = 0, absmax2_bytes = 0;         // nf4: 4*groups (fp32)
  size_t offset = 0, offset_bytes = 0;           // nf4: 4 (one fp32)
  size_t bytes = 0;                              // the whole piece, a multiple of kQuantArrayAlign
  // True where the last block is padded with zeros (elements not a multiple of the block).
  bool padded() const { return blocks * kQuantBlock != elements && blocks > 0; }
};

inline QuantPiece PieceLayout(BaseDType dtype, size_t elements) {
  QuantPiece p;
  p.elements = elements;
  size_t at = 0;
  auto add = [&at](size_t bytes, size_t* offset, size_t* size) {
    *offset = at;
    *size = bytes;
    at += AlignQuant(bytes);
  };
  switch (dtype) {
    case BaseDType::kTrain:
      break;
    case BaseDType::kBF16:
      add(2 * elements, &p.codes, &p.code_bytes);
      break;
    case BaseDType::kInt8:
      p.blocks = (elements + kQuantBlock - 1) / kQuantBlock;
      add(p.blocks * kQuantBlock, &p.codes, &p.code_bytes);
      add(4 * p.blocks, &p.absmax, &p.absmax_bytes);
      break;
    case BaseDType::kNF4:
      p.blocks = (elements + kQuantBlock - 1) / kQuantBlock;
      p.groups = (p.blocks + kAbsmaxGroup - 1) / kAbsmaxGroup;
      add(p.blocks * kQuantBlock / 2, &p.codes, &p.code_bytes);
      add(p.blocks, &p.absmax, &p.absmax_bytes);
      add(4 * p.groups, &p.absmax2, &p.absmax2_bytes);
      add(4, &p.offset, &p.offset_bytes);
      break;
  }
  p.bytes = at;
  return p;
}

// The 16 NF4 values, ascending (index 7 is 0.0).
const std::array<float, 16>& Nf4Values();
// The 8-bit dynamic quantization map, 256 values ascending: signed (in [-1, 1], for the
// NF4 absmaxes and Adam's first moment) or unsigned (in [0, 1], Adam's second moment).
const std::array<float, 256>& DynamicMap(bool is_signed);

}  // namespace strata
