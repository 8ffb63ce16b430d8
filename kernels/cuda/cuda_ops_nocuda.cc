// CreateCudaOps where strata is built without CUDA (no toolkit, or --config=nocuda): it says
// so, so that a configuration asking for CUDA kernels fails with a clear message instead of
// a link error. See cuda_ops.h.
#include "kernels/cuda/cuda_ops.h"

namespace strata {

StatusOr<std::unique_ptr<Ops>> CreateCudaOps(DType, CudaAttention) {
  return absl::UnimplementedError(
      "CUDA kernels are not available: strata was built without CUDA (no CUDA toolkit at "
      "build time, or --config=nocuda); rebuild on a machine with the toolkit");
}

}  // namespace strata
