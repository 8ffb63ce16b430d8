// The host reduction every host Communicator uses: the fixed rank-order sum that defines
// the result of all-reduce and reduce-scatter (communicator.h). Element i of the result is
// acc = float(source[0][i]); acc += float(source[1][i]); ... in source order, in fp32, then
// stored once (rounded to nearest even for bf16). Only additions, so no FMA contraction can
// change a bit; the result depends on the inputs alone, never on threads or blocking.
// Outputs may alias sources element for element (in place): every source of an element is
// read before any output of it is written.
// Thread-safety: a pure function of its arguments; callers keep buffers from changing.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace strata {

// outputs[k][i] = sum over s in 0..num_sources-1 (in that order) of sources[s][i], for every
// k < num_outputs and i < count. All buffers hold `dtype` elements.
void SumInRankOrder(const void* const* sources, int num_sources, void* const* outputs,
                    int num_outputs, size_t count, DType dtype);

// The same fold in pieces, for sums chained across nodes (mpi_communicator.h): with
// `resume` false, acc[i] = float(sources[0][i]) + sources[1][i] + ...; with `resume` true
// the fold goes on from acc[i] (a partial sum of the ranks before, kept in fp32):
// acc[i] = acc[i] + sources[0][i] + .... Folding ranks 0..a-1 and then resuming with
// a..N-1 performs exactly the additions of SumInRankOrder over 0..N-1, so StoreSums of
// the result gives the same bits.
void AccumulateInRankOrder(float* acc, bool resume, const void* const* sources, int num_sources,
                           size_t count, DType dtype);

// out[i] = acc[i] stored as `dtype` (rounded to nearest even for bf16): the one rounding.
void StoreSums(const float* acc, void* out, size_t count, DType dtype);

}  // namespace strata
