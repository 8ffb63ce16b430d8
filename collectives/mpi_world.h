// What the MPI communicator is given and what it finds (collectives/mpi_communicator.h):
// its options and this process's place in the MPI world. Apart from the communicator,
// so that the MPI internals (mpi_process.h, mpi_state.h) need not include it.
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

struct MpiOptions {
  // zero.comm_timeout_s: how long one collective may take before it fails with
  // kDeadlineExceeded naming the ranks that did not answer, and how long one may wait on
  // its stream to start (start_watch.h; the peers are told). Must be > 0.
  double timeout_s = 300.0;

  // Performance: the most scratch memory one reduction uses (received chunks waiting to be
  // summed), per communicator; larger reductions run in segments. 4 KiB .. 1 GiB.
  size_t max_scratch_bytes = 64u << 20;
};

// A process's place in MPI_COMM_WORLD (GetMpiWorld).
struct MpiWorld {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes on this node (the GPU to use)
  int local_size = 1;
  std::string host;
};

}  // namespace strata
