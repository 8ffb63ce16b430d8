// CPU transpose of an fp32 block between two strided matrices:
//   dest[j * dest_stride + i] = source[i * source_stride + j]   for i < rows, j < cols,
// i.e. the [rows, cols] block at `source` lands as its [cols, rows] transpose at `dest`.
// The import uses it for GPT-2's Conv1D matrices, which Hugging Face stores as [in, out]
// and strata as [out, in].
// The reference is the specification (element by element); the fast version moves 8x8
// tiles through AVX registers (run-time choice; the reference's loop where the CPU has no
// AVX), so a tile's 8 source rows and 8 destination rows stay in L1 however large the
// strides (a plain element loop over strides that are multiples of 4 KiB misses L1 on every
// read). Both produce the same bits (a copy, no arithmetic). Single-threaded: callers split
// their work into tasks.
// Thread-safety: reentrant.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace strata::cpu {

void TransposeReference(const float* source, size_t source_stride, size_t rows, size_t cols,
                        float* dest, size_t dest_stride);
void Transpose(const float* source, size_t source_stride, size_t rows, size_t cols, float* dest,
               size_t dest_stride);

// The same from bf16 values, widened to fp32 (exactly) on the way: GPT-2's Conv1D matrices
// in BF16 files, transposed from where the read put them. The fast version widens each
// tile's rows in AVX2 registers (the reference's loop where the CPU has no AVX2).
void TransposeReference(const bf16* source, size_t source_stride, size_t rows, size_t cols,
                        float* dest, size_t dest_stride);
void Transpose(const bf16* source, size_t source_stride, size_t rows, size_t cols, float* dest,
               size_t dest_stride);

}  // namespace strata::cpu
