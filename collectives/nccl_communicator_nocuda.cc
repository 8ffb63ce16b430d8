// CreateNcclCommunicator where strata is built without CUDA (no toolkit, or
// --config=nocuda): says so, so that a configuration asking for NCCL fails with a clear
// message instead of a link error. See nccl_communicator.h.
#include "collectives/nccl_communicator.h"

namespace strata {

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Device&, Communicator&,
                                                               const NcclOptions&) {
  return absl::UnavailableError(
      "strata was built without CUDA (no CUDA toolkit at build time, or --config=nocuda), so "
      "without NCCL; rebuild on a machine with the toolkit to use device.backend=cuda");
}

bool BuiltWithNccl() { return false; }

}  // namespace strata
