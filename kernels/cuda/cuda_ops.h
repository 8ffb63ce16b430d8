// The CUDA backend's Ops (kernels/ops.h): every call checks its sizes and pointers, finds
// the cudaStream_t of the given Stream (device/cuda/cuda_native.h), makes that stream's GPU
// current on the calling thread and enqueues its work there: GEMMs through cuBLAS
// (cublasGemmEx, fp32 accumulation; fp32 or bf16 in and out), everything else through the
// kernels of cuda_kernels.h. Nothing blocks the host.
// Invariants: the Ops object is created for one compute dtype; every `void*` it receives
// points to device memory holding elements of that dtype. Size errors (negative sizes, C not
// a multiple of NH or NH of NKV, an odd RoPE head size, V over Vp, a required pointer that is
// null) and a Stream of another backend are returned at once as InvalidArgument, an attention
// head size over 128 or a RoPE one over 256 as Unimplemented, and nothing is enqueued; launch and
// cuBLAS errors are returned as Status; faults while a kernel runs surface at the stream's next
// Synchronize. All reductions run in a fixed order: results are deterministic run to run.
// Thread-safety: as Ops: usable from any thread. It keeps one cuBLAS handle per stream it
// has run a GEMM on (created on first use, with cuBLAS's default workspace, and destroyed
// with the object), guarded by a mutex that is also held while a GEMM is enqueued. Destroy
// the Ops object before those streams and their CUDA Device: the handles are bound to them.
// Memory outside the Device's pools: the cuBLAS handles' workspaces, small stream-ordered
// scratch (cudaMallocAsync) for SumSquares and the parameter-gradient sums, and the GEMM
// attention's score matrices (up to 256 MiB per call, more where one head's T x T scores
// need it).
//
// This header builds everywhere; where strata is built without CUDA (no toolkit, or
// --config=nocuda) CreateCudaOps returns kUnimplemented.
#pragma once

#include <memory>

#include "kernels/ops.h"
#include "core/dtype.h"
#include "core/status.h"

namespace strata {

// Which attention kernels run (device.cuda_attention).
enum class CudaAttention {
  // kernels/attention_gemm.h: every product a cuBLAS strided-batched GEMM (tensor cores in
  // bf16), T x T scores per head in stream-ordered scratch (chunks of heads within 256 MiB
  // per call, at least one head), softmax in row kernels.
  kGemm,
  // attention.cu: tiled flash-style kernels on CUDA cores; no T x T scratch; head size
  // <= 128.
  kFlash,
};

// Ops for CUDA streams in compute dtype `dtype` (fp32 or bf16). Creates no CUDA state until
// the first call.
StatusOr<std::unique_ptr<Ops>> CreateCudaOps(DType dtype,
                                             CudaAttention attention = CudaAttention::kGemm);

}  // namespace strata
