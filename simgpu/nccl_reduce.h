// simgpu/nccl_reduce.h: the element types and reductions of the NCCL double
// (libnccl_simgpu.so). A reduction combines its sources strictly in the order given (the
// callers pass rank 0 first), so every rank computes the same bits from the same inputs.
// 16-bit floats (fp16, bf16) are accumulated in fp32 and rounded once, to nearest even, at
// the end, as strata's own fixed-order sums do (collectives/reduce.cc); fp32 and fp64 add in
// their own precision; integers wrap as the GPU's do.
// Thread-safety: pure functions.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>

namespace simgpu {
namespace nccl {

// Bytes of one element of `type`; 0 for a value that is not an ncclDataType_t.
size_t ElementBytes(ncclDataType_t type);

// "float", "bf16", ... for messages; "type 42" for an unknown value.
std::string TypeName(ncclDataType_t type);

// "sum", "max", ... for messages; "op 42" for an unknown value.
std::string ReductionName(ncclRedOp_t op);

// "" when `op` over `type` is supported, else why not (the fp8 types and operators made by
// ncclRedOpCreatePreMulSum have no reduction here).
std::string CheckReduction(ncclDataType_t type, ncclRedOp_t op);

// out[i] = sources[0][i] op sources[1][i] op ... for i < count, in source order. `out` may
// be one of the sources only if it is the same pointer (element i is read before written).
// `op` over `type` must have passed CheckReduction.
void Reduce(const void* const* sources, int num_sources, void* out, size_t count,
            ncclDataType_t type, ncclRedOp_t op);

}  // namespace nccl
}  // namespace simgpu
