// Blockwise quantization of a frozen base's matrices (core/quant_format.h): encoding on the
// host (fp32 in) and decoding to fp32 or bf16, for the formats nf4 (QLoRA's 4-bit NormalFloat
// with double-quantized absmaxes), int8 (symmetric absmax per block of 64) and bf16.
// docs/quantization.md is the specification, bit for bit; the `...Reference` functions are it
// written as plain loops, the others are the fast versions (OpenMP over blocks, vectorisable
// inner loops compiled for AVX-512 / AVX2 / baseline and chosen at run time) and give the
// same bits. Compiled with -ffp-contract=off: no product and sum is fused into an FMA, so the
// CUDA kernels (kernels/cuda/quantize.cu, __fmul_rn/__fadd_rn) agree bit for bit too.
//
// The encoding is split so that a rank can encode only its part of a piece: BlockAbsmax over
// the whole piece, QuantizeAbsmaxes over all its blocks (the offset and absmax2 depend on every
// block), then EncodeNf4 / EncodeInt8 over any range of whole blocks with those blocks' fp32
// absmaxes. Inputs must be finite (QuantizePiece checks; the pieces below do not).
// Thread-safety: reentrant; fast versions run an OpenMP parallel region on the calling
// thread's pool, references run on the calling thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/quant_format.h"
#include "core/status.h"

namespace strata::cpu {

// The 15 decision points of the NF4 encoding: float((double(v[i]) + double(v[i+1])) / 2)
// of adjacent Nf4Values(); and the 255 of the signed dynamic map (the absmax codes).
const std::array<float, 15>& Nf4Midpoints();
const std::array<float, 255>& DynamicMapMidpoints(bool is_signed);

// absmax[b] = max |x[i]| over block b = [64 b, 64 b + 64) of x (ceil(n / 64) blocks; the last
// block's padding counts as 0), stored as 0 when below kQuantMinAbsmax.
void BlockAbsmaxReference(const float* x, size_t n, float* absmax);
void BlockAbsmax(const float* x, size_t n, float* absmax);

// Double quantization of a piece's `blocks` NF4 absmaxes: *offset = their mean (summed in
// double, in block order), codes[b] = the signed dynamic map's code of (absmax[b] - offset) /
// absmax2[g] for each group g of kAbsmaxGroup blocks, absmax2[g] = max |absmax[b] - offset|
// over the group (0 when below kQuantMinAbsmax: the group's codes are then the map's 0).
// codes: `blocks` bytes; absmax2: ceil(blocks / kAbsmaxGroup) floats. O(blocks): one version.
void QuantizeAbsmaxes(const float* absmax, size_t blocks, uint8_t* codes, float* absmax2,
                      float* offset);
// out[b] = DynamicMap(true)[codes[b]] * absmax2[b / kAbsmaxGroup] + offset (fp32 product, then
// fp32 sum).
void DequantizeAbsmaxes(const uint8_t* codes, const float* absmax2, float offset, size_t blocks,
                        float* out);

// NF4 codes of x[0, n) (x starts on a block boundary) with the blocks' fp32 absmaxes: block b's
// 32 bytes at codes + 32 b, element 2i of it in the high nibble of byte i, 2i + 1 in the low
// one; the padding of the last block is encoded as 0.0 (code 7). ceil(n / 64) * 32 bytes.
void EncodeNf4Reference(const float* x, size_t n, const float* absmax, uint8_t* codes);
void EncodeNf4(const float* x, size_t n, const float* absmax, uint8_t* codes);
// int8 codes (-127..127) of x[0, n) with the blocks' absmaxes; padding encoded as 0.
// ceil(n / 64) * 64 bytes.
void EncodeInt8Reference(const float* x, size_t n, const float* absmax, int8_t* codes);
void EncodeInt8(const float* x, size_t n, const float* absmax, int8_t* codes);

// Decoding into T (float, or bf16 rounded to nearest even once per element): the first n
// values of a piece from its arrays (absmax_codes, absmax2 and offset as QuantizeAbsmaxes
// wrote them). Element i of block b is Nf4Values()[code] * a'[b], a' from DequantizeAbsmaxes.
template <typename T>
void DequantizeNf4Reference(T* out, const uint8_t* codes, const uint8_t* absmax_codes,
                            const float* absmax2, float offset, size_t n);
template <typename T>
void DequantizeNf4(T* out, const uint8_t* codes, const uint8_t* absmax_codes, const float* absmax2,
                   float offset, size_t n);
// Element i of block b is float(codes[i]) * (absmax[b] / 127).
template <typename T>
void DequantizeInt8Reference(T* out, const int8_t* codes, const float* absmax, size_t n);
template <typename T>
void DequantizeInt8(T* out, const int8_t* codes, const float* absmax, size_t n);
// out = in, widened to fp32 or copied (T = bf16).
template <typename T>
void WidenBf16Reference(T* out, const bf16* in, size_t n);
template <typename T>
void WidenBf16(T* out, const bf16* in, size_t n);

// One whole piece of n values of x in `dtype` (kBF16, kInt8 or kNF4), written at `piece` in
// PieceLayout(dtype, n)'s layout (PieceLayout(dtype, n).bytes bytes; the alignment gaps are
// zeroed). Fast versions. Fails (InvalidArgument, naming the first index) on a value that is
// not finite, and on kTrain, which stores nothing; nothing is written then.
Status QuantizePiece(BaseDType dtype, const float* x, size_t n, uint8_t* piece);
// The n fp32 values a piece stores (the references): what exports and hashes read.
// dtype is kBF16, kInt8 or kNF4.
void DequantizePiece(BaseDType dtype, const uint8_t* piece, size_t n, float* out);

}  // namespace strata::cpu
