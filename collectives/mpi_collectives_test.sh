#!/usr/bin/env bash
# The MPI communicator across processes: mpi_collectives_check (every collective, fp32 and
# bf16, odd counts, in place and out of place, exact bytes against the rank-order reference
# and against the local communicator) under mpirun with 1, 2, 3 and 4 ranks on this machine.
# Each run is bounded by `timeout`, so the test fails rather than hangs.
# Last, the layouts benchmark once, small: flat, hierarchical and hybrid sharding's bytes
# equal their formulas on every rank.
# Usage (from Bazel): mpi_collectives_test.sh <path of mpi_collectives_check>
#                     [<path of mpi_layouts_bench>]
set -uo pipefail

readonly BINARY="$1"
readonly BENCH="${2:-}"
# Open MPI puts its session sockets under TMPDIR; Bazel's is too long for a socket path.
TMPDIR="$(mktemp -d /tmp/strata_mpi.XXXXXX)"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

failures=0
for np in 1 2 3 4; do
  log="$TMPDIR/np$np.log"
  start=$(date +%s.%N)
  timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np "$np" "$BINARY" >"$log" 2>&1
  status=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  passed=$(grep -c "PASS, " "$log")
  if [ "$status" -ne 0 ] || [ "$passed" -ne "$np" ]; then
    echo "FAIL: -np $np: exit $status, $passed of $np ranks passed, ${elapsed}s"
    [ "$status" -eq 124 ] && echo "  (mpirun did not finish within 60 s)"
    cat "$log"
    failures=$((failures + 1))
  else
    echo "ok: -np $np in ${elapsed}s"
    grep "PASS, " "$log" | sort
  fi
done
# One host playing several nodes (STRATA_RANKS_PER_NODE=k): the same exact checks, with the
# hierarchical path from 64 KiB up, and every rank's bytes within and across nodes against
# the formulas of docs/multinode.md.
for layout in "4 2" "6 3" "6 2"; do
  set -- $layout
  np=$1 k=$2
  log="$TMPDIR/np${np}k$k.log"
  timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np "$np" \
    -x STRATA_RANKS_PER_NODE="$k" -x STRATA_MPI_HIERARCHICAL_MIN_BYTES=65536 \
    "$BINARY" >"$log" 2>&1
  status=$?
  passed=$(grep -c "PASS, " "$log")
  # Every rank must have run the hierarchical path (its count is printed per rank).
  hierarchical=$(grep "PASS, " "$log" | grep -vc " 0 hierarchical")
  if [ "$status" -ne 0 ] || [ "$passed" -ne "$np" ] || [ "$hierarchical" -ne "$np" ]; then
    echo "FAIL: -np $np as nodes of $k: exit $status, $passed of $np ranks passed," \
      "$hierarchical ran hierarchical collectives"
    cat "$log"
    failures=$((failures + 1))
  else
    echo "ok: -np $np as nodes of $k ranks"
    grep "PASS, " "$log" | sort
  fi
done

# Refusals, each with its message: a layout that does not divide the world, and ranks that
# disagree on the layout.
expect_refusal() {
  local name="$1" pattern="$2"
  shift 2
  local log="$TMPDIR/$name.log"
  timeout -k 5 60 "$@" >"$log" 2>&1
  local status=$?
  if [ "$status" -eq 0 ] || ! grep -q -- "$pattern" "$log"; then
    echo "FAIL: $name: exit $status, expected an error matching '$pattern'"
    cat "$log"
    failures=$((failures + 1))
  else
    echo "ok: $name refused: $(grep -m1 -- "$pattern" "$log")"
  fi
}
expect_refusal uneven "STRATA_RANKS_PER_NODE=2 does not divide the world of 3 ranks" \
  mpirun --allow-run-as-root --oversubscribe -np 3 -x STRATA_RANKS_PER_NODE=2 "$BINARY"
expect_refusal bad_value "STRATA_RANKS_PER_NODE='2x'" \
  mpirun --allow-run-as-root --oversubscribe -np 2 -x STRATA_RANKS_PER_NODE=2x "$BINARY"
expect_refusal disagree "the ranks disagree" \
  mpirun --allow-run-as-root --oversubscribe -np 2 sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then export STRATA_RANKS_PER_NODE=1; fi; exec "$0"' \
  "$BINARY"
if [ -n "$BENCH" ]; then
  log="$TMPDIR/bench.log"
  timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np 4 -x STRATA_RANKS_PER_NODE=2 \
    "$BENCH" --elements=40000 --iterations=1 >"$log" 2>&1
  status=$?
  if [ "$status" -ne 0 ] || ! grep -q "^PASS: every rank's bytes equal the formulas" "$log"; then
    echo "FAIL: mpi_layouts_bench: exit $status"
    cat "$log"
    failures=$((failures + 1))
  else
    echo "ok: mpi_layouts_bench's bytes equal the formulas"
    cat "$log"
  fi
fi
exit $((failures > 0))
