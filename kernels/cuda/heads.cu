// CopyHeads on CUDA (cuda_kernels.h; specification: kernels/cpu/heads.h): a grid-stride loop
// with one thread per copied element; a copy of the stored values, exact.
// Thread-safety: launchers are reentrant.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace strata::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// Element e of rows = (n * count + j) * hs + d; its head element is
// (n * heads_per_row + first + j) * hs + d.
template <typename S>
__global__ void CopyHeadsKernel(S* qkv, S* rows, int heads_per_row, int first, int count, int hs,
                                bool to_rows, size_t total) {
  const size_t run = static_cast<size_t>(count) * hs;
  STRATA_GRID_STRIDE_LOOP(index, total) {
    const size_t n = index / run, within = index % run;
    S* head = qkv + (n * heads_per_row + first) * hs + within;
    if (to_rows) {
      rows[index] = *head;
    } else {
      *head = rows[index];
    }
  }
}

}  // namespace

Status CopyHeads(DType dtype, void* qkv, void* rows, int N, int heads_per_row, int first, int count,
                 int hs, bool to_rows, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * count * hs;
  if (total == 0) return absl::OkStatus();
  DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&CopyHeadsKernel<S>>(GridStrideBlocks(total, kThreads), kThreads, 0,
                                                stream, static_cast<S*>(qkv), static_cast<S*>(rows),
                                                heads_per_row, first, count, hs, to_rows, total);
    return 0;
  });
  return LaunchStatus("CopyHeadsKernel", total);
}

}  // namespace strata::cuda_kernels
