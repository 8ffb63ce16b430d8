// AdamW with 8-bit states on the CPU (train.optimizer_states = int8; specification:
// docs/quantization.md, "8-bit Adam states"). The moments m and v live as one code per element
// (m: the signed dynamic map, v: the unsigned one; core/quant_format.h DynamicMap) and an fp32
// absmax per block of kAdamStateBlock = 2048 elements; the fp32 master stays fp32. One step of
// a block: decode m and v, today's fp32 AdamW update (kernels/cpu/adamw.h, same formula and
// operation order), write master and the compute-dtype param copy, then encode the block's new
// m and v against their new absmaxes.
//
// Paths as the SIMD CPU Adam (kernels/cpu/cpu_adam.h, whose CpuAdamPath and ResolveCpuAdamPath
// are reused, STRATA_CPU_ADAM included): "avx512", "avx2" (the encoding by a look-up table
// bucketed on the float's top bits and one compare, the decoding from registers or a gather)
// and the scalar "reference". Every path gives the reference's bits, whatever the path, thread
// count, size or alignment: the library is compiled with -ffp-contract=off, divisions and square
// roots are the IEEE ones, and each block is processed whole by one thread (its absmax is a max,
// which does not depend on the order).
//
// Arrays: element i's codes at m_codes[i], v_codes[i]; block b's absmaxes at m_absmax[b],
// v_absmax[b] (ceil(n / 2048) of each). The range [0, n) starts on a block boundary of the
// unit; every block is whole except possibly the last (a unit's tail). Fresh states (step 1)
// are all-zero moments: QuantizeMoments of zeros (m codes 127, v codes 0, absmaxes 0).
// Values must be finite; with a NaN or infinite gradient the results are undefined (they are
// still the same on every path, NaN payloads aside).
//
// Thread-safety: reentrant; Adam8bitStep runs an OpenMP parallel region of the calling thread,
// each thread owning whole blocks; the references run on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/quant_format.h"
#include "core/status.h"
#include "kernels/cpu/cpu_adam.h"  // CpuAdamPath, ResolveCpuAdamPath
#include "kernels/ops.h"           // AdamParams

namespace strata::cpu {

struct Adam8bitOptions {
  // kAuto: STRATA_CPU_ADAM if set, else the best path of this CPU (ResolveCpuAdamPath).
  CpuAdamPath path = CpuAdamPath::kAuto;
  // OpenMP threads per step; < 1: omp_get_max_threads() at each call. Never more than blocks.
  int threads = 0;
};

// Blocks of an array of n elements: ceil(n / kAdamStateBlock).
inline constexpr size_t Adam8bitBlocks(size_t n) {
  return (n + kAdamStateBlock - 1) / kAdamStateBlock;
}

// One AdamW step of the n elements [0, n) with 8-bit moments. param (param_dtype: fp32 or
// bf16, rounded to nearest even) may be null (skipped); no two arrays may overlap. hp.step
// must be >= 1 (InvalidArgument otherwise); a forced path the CPU lacks is FailedPrecondition.
Status Adam8bitStep(const Adam8bitOptions& options, DType param_dtype, void* param, float* master,
                    const float* grad, uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
                    float* v_absmax, size_t n, const AdamParams& hp);

// The specification: a single-threaded scalar loop over the blocks. T: float or bf16.
template <typename T>
void Adam8bitReference(T* param, float* master, const float* grad, uint8_t* m_codes,
                       float* m_absmax, uint8_t* v_codes, float* v_absmax, size_t n,
                       const AdamParams& hp);

// The encoding of a moment array x[0, n) (block-aligned, as above) with the signed
// (is_signed: m) or unsigned (v) map: absmax[b] = max |x| over block b (0 when below
// kQuantMinAbsmax), codes[i] = the code of x[i] * (1.0f / absmax[b]) (the code of 0 for a
// zero block). For converting fp32 moments (a checkpoint, a tensor that crosses the size rule)
// to 8 bits. Scalar; O(n).
void QuantizeMoments(const float* x, size_t n, bool is_signed, uint8_t* codes, float* absmax);
// out[i] = map[codes[i]] * absmax[i / 2048] (one fp32 product): the moments a step decodes.
void DequantizeMoments(const uint8_t* codes, const float* absmax, size_t n, bool is_signed,
                       float* out);

// Test support: the code of y (the signed map or the unsigned one) as the SIMD paths' look-up
// table gives it (scalar); equal to the reference's count of decision points below y.
uint8_t Adam8bitLutCodeForTesting(float y, bool is_signed);
// Test support: blocks each path has stepped in this process (proves a forced path ran).
uint64_t Adam8bitBlocksRunForTesting(CpuAdamPath path);

}  // namespace strata::cpu
