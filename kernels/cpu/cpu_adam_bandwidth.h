// The bandwidth reference of the CPU Adam: a kernel with exactly CpuAdam::Step's memory
// traffic and next to no arithmetic, written to run as fast as memory allows. It is the
// denominator of `strata bench adam`: memory bandwidth on the target machines drifts between
// levels, so the Adam's throughput is only meaningful as a ratio to this kernel measured
// alternately in the same process.
//   fp32 params (param null): read master, grad, m, v; write master, m, v (28 bytes/element).
//   bf16 params: the same plus a 2-byte write per element (30 bytes/element).
// Values: master, m and v are rewritten unchanged (x + 0 * grad, with the 0 unknown to the
// compiler, so the stores cannot be elided); bf16 params get master's upper 16 bits.
// It uses the widest instruction set of the CPU (run-time choice) and the same thread split
// as CpuAdam::Step (contiguous ranges aligned to 64 elements).
// Thread-safety: reentrant; runs an OpenMP region on the calling thread's pool.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace strata::cpu {

// threads < 1: omp_get_max_threads(). `param` may be null (the fp32 pattern).
void AdamTrafficReference(bf16* param, float* master, const float* grad, float* m, float* v,
                          size_t n, int threads);

// "avx512", "avx2" or "scalar".
const char* AdamTrafficReferenceIsaName();

}  // namespace strata::cpu
