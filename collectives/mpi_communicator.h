// The MPI Communicator: one rank per process under `mpirun` (Open MPI), host buffers, used
// by the CPU backend across processes.
//
// MPI is initialized once per process (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, at
// least MPI_THREAD_SERIALIZED, in which case every MPI call takes one process-wide lock:
// collectives run on the comm stream's worker thread) and finalized at process exit by a
// guard. Each communicator duplicates MPI_COMM_WORLD (errors returned, not fatal).
//
// Algorithms (all point-to-point, non-blocking, so that reductions have the FIXED rank
// order of communicator.h and give the same bits as the local communicator; MPI_Allreduce's
// order is not specified):
// - reduce-scatter: every rank sends chunk j of its input to rank j, which sums the N
//   chunks in rank order 0..N-1 (fp32 accumulator, one rounding for bf16). Each rank sends
//   and receives (N-1)/N of the data, as in a ring, and no partial sum is ever rounded.
// - all-reduce: the same reduce-scatter on N near-equal chunks, then every owner sends its
//   reduced chunk to every rank.
// - all-gather and broadcast: direct sends (bytes are copied, so any order is exact).
// - barrier: a zero-byte message from every rank to every rank.
// Reductions bound their scratch memory (max_scratch_bytes) by running in segments.
// Node-aware (docs/multinode.md): with the ranks on n nodes of k ranks in rank blocks (from
// MPI_COMM_TYPE_SHARED, or STRATA_RANKS_PER_NODE=k), large all-reduces, reduce-scatters
// and all-gathers go within nodes and then among them (mpi_hierarchical.cc), where that
// sends fewer bytes across nodes; reductions then chain fp32 partial sums through the nodes
// in rank order, so their results are bit-identical to the flat path's. node_traffic()
// gives the layout and the bytes sent within and across nodes.
//
// Failure: every wait polls MPI_Testsome until a deadline (timeout_s from the start of the
// collective), never blocks in MPI. On timeout the collective fails with kDeadlineExceeded
// naming the operation, its sequence number and the ranks whose messages did not arrive;
// a rank that sent a different size (ranks issued different collectives) fails it with
// kInvalidArgument; Abort(reason) sends the reason to every peer, whose waits fail at once
// with kAborted naming the rank. After any failure the communicator stays failed, the
// process is marked failed and the exit guard skips MPI_Finalize (it would wait for the
// dead or stuck peer): the process exits without finalizing, and mpirun then tears the
// whole job down and exits non-zero. When a rank is killed, mpirun itself notices at once,
// kills the others (SIGTERM) and exits non-zero; InstallMpiTerminationReport() makes a rank
// killed that way first print which collective it was waiting in and for whom.
// A failed collective may leave MPI receives cancelled but not known to be finished: its
// buffers must not be reused; the process should report and exit.
// Thread-safety: as Communicator.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "collectives/mpi_world.h"

namespace strata {

// This process's place in MPI_COMM_WORLD, initializing MPI if need be.
StatusOr<MpiWorld> GetMpiWorld();

// A communicator over every process of MPI_COMM_WORLD (duplicated, so its messages never
// mix with another communicator's). Collective: every process must call it; fails with
// kDeadlineExceeded if they do not all do so within options.timeout_s. Works without
// mpirun too (a singleton world of size 1).
StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiOptions& options);

// Opt-in, for programs run under mpirun: on SIGTERM (how mpirun stops the other ranks when
// one dies), prints "strata MPI rank R of N: terminated by SIGTERM while in <collective>
// waiting for rank(s) ..." (or "outside any collective") to stderr, then dies of SIGTERM
// as before. Async-signal-safe; idempotent.
void InstallMpiTerminationReport();

}  // namespace strata
