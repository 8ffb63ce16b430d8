#!/usr/bin/env bash
# A rank of a multi-process run that dies, stops answering or aborts makes the others fail
# with a clear error naming the operation and the rank, within the timeout, and mpirun
# ends; nothing hangs (every mpirun is bounded by `timeout 60`, and each case by a time
# limit well under it). Three ranks; rank 1 misbehaves at all_reduce #3.
#   hang:          rank 1 alive but silent -> ranks 0 and 2 fail with DEADLINE_EXCEEDED after
#                  --timeout_s, naming all_reduce #3 and rank 1; mpirun exits non-zero.
#   die:           rank 1 SIGKILLs itself -> mpirun notices, names rank 1, stops the others
#                  (which report the collective they were in and for whom they waited) and
#                  exits non-zero.
#   die, --enable-recovery: mpirun lets the job run on -> the survivors' own timeout fires.
#   abort:         rank 1 calls Abort(reason) -> the others fail at once (timeout 60 s not
#                  reached) with ABORTED naming rank 1 and the reason, in all_reduce #3 or,
#                  for a rank still finishing #2, in #2.
#   stuck:         rank 1's stream runs work that does not finish, so its all_reduce #3 never
#                  starts -> after --timeout_s its start watch logs it and tells the peers,
#                  which fail naming rank 1's stuck collective (they arrive late on purpose,
#                  so their own timeout comes second).
# Usage (from Bazel): mpi_failure_test.sh <path of mpi_collectives_check>
set -uo pipefail

readonly BINARY="$1"
TMPDIR="$(mktemp -d /tmp/strata_mpi.XXXXXX)"  # short socket paths for Open MPI
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

failures=0
log=""
status=0
elapsed=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# run NAME [mpirun options] -- [binary options]: runs 3 ranks, sets log, status, elapsed.
run() {
  local name="$1"
  shift
  local mpirun_options=()
  while [ "$1" != "--" ]; do
    mpirun_options+=("$1")
    shift
  done
  shift
  log="$TMPDIR/$name.log"
  local start
  start=$(date +%s.%N)
  timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe "${mpirun_options[@]}" -np 3 \
    "$BINARY" "$@" >"$log" 2>&1
  status=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  echo "--- $name: mpirun exit $status after ${elapsed}s"
  grep -E "strata MPI|rank [0-9]:|mpirun noticed" "$log" | sed 's/^/    /'
  [ "$status" -eq 124 ] && fail "$name: mpirun still running after 60 s"
}

expect_in_log() {  # expect_in_log CASE TEXT (fixed string)
  grep -qF -- "$2" "$log" || fail "$1: the output lacks: $2"
}

expect_faster_than() {  # expect_faster_than CASE SECONDS
  [ "$(echo "$elapsed < $2" | bc)" -eq 1 ] || fail "$1: took ${elapsed}s, limit $2 s"
}

readonly TIMED_OUT="all_reduce #3 (1000 x fp32) timed out after 3 s (zero.comm_timeout_s): \
no answer from rank(s) 1"
readonly ABORTED="MPI rank 1 aborted the group: simulated failure of rank 1 at step 3"

run hang -- --mode=hang --victim=1 --at=3 --timeout_s=3
[ "$status" -ne 0 ] || fail "hang: mpirun exited 0"
expect_faster_than hang 20
for survivor in 0 2; do
  expect_in_log hang "rank $survivor: collective failed after"
  expect_in_log hang "DEADLINE_EXCEEDED: stream 'comm': MPI rank $survivor of 3: $TIMED_OUT"
done

run die -- --mode=die --victim=1 --at=3 --timeout_s=30
[ "$status" -ne 0 ] || fail "die: mpirun exited 0"
expect_faster_than die 20
expect_in_log die "process rank 1 with PID"
expect_in_log die "exited on signal 9 (Killed)"
expect_in_log die "terminated by SIGTERM"
expect_in_log die "while in all_reduce #3 (1000 x fp32) waiting for rank(s) 1"

run die_recovery --enable-recovery -- --mode=die --victim=1 --at=3 --timeout_s=3
expect_faster_than die_recovery 20
for survivor in 0 2; do
  expect_in_log die_recovery "MPI rank $survivor of 3: $TIMED_OUT"
done

run abort -- --mode=abort --victim=1 --at=3 --timeout_s=60
[ "$status" -ne 0 ] || fail "abort: mpirun exited 0"
expect_faster_than abort 20
for survivor in 0 2; do
  # A survivor still finishing all_reduce #2 (rank 1 is done with it) fails there: an
  # aborted group fails pending collectives too.
  pattern="ABORTED: stream 'comm': MPI rank $survivor of 3: all_reduce #[23] \(1000 x fp32\)"
  grep -qE "$pattern: $ABORTED" "$log" ||
    fail "abort: rank $survivor did not report rank 1's abort"
done

run stuck -- --mode=stuck --victim=1 --at=3 --timeout_s=3
[ "$status" -ne 0 ] || fail "stuck: mpirun exited 0"
expect_faster_than stuck 20
readonly STUCK="MPI rank 1 of 3: all_reduce #3 (1000 x fp32) issued on stream 'comm' did not \
start within 3 s"
expect_in_log stuck "DEADLINE_EXCEEDED: $STUCK"  # the victim's own log line
for survivor in 0 2; do
  expect_in_log stuck "rank $survivor: collective failed after"
  expect_in_log stuck "MPI rank $survivor of 3: all_reduce #3 (1000 x fp32): $STUCK"
done

if [ "$failures" -ne 0 ]; then
  for f in "$TMPDIR"/*.log; do
    echo "===== $f"
    cat "$f"
  done
  exit 1
fi
echo "all failure cases behaved"
