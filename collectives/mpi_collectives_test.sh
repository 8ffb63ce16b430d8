#!/usr/bin/env bash
# The MPI communicator across processes: mpi_collectives_check (every collective, fp32 and
# bf16, odd counts, in place and out of place, exact bytes against the rank-order reference
# and against the local communicator) under mpirun with 1, 2, 3 and 4 ranks on this machine.
# Each run is bounded by `timeout`, so the test fails rather than hangs.
# Usage (from Bazel): mpi_collectives_test.sh <path of mpi_collectives_check>
set -uo pipefail

readonly BINARY="$1"
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
exit $((failures > 0))
