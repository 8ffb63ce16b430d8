#!/usr/bin/env bash
# A job across simulated nodes ends, with an error that names what happened, when a node
# fails under it; nothing hangs:
#   a rank killed (SIGKILL of a strata process on node1): mpirun notices within seconds,
#     names the rank and node, and ends the job with a non-zero status;
#   a link cut (node1's only link set down; there is no netem here): the ranks on node0
#     fail with strata's own error naming the collective and the silent rank within
#     zero.comm_timeout_s, and mpirun ends within seconds after (its TCP keepalives,
#     nodes.sh's settings, notice the lost daemon).
# Usage (from Bazel): failure_test.sh <strata> <nodes.sh> (runs.sh beside it)
set -uo pipefail
source "$(dirname "$2")/runs.sh"
runs_start "$1" 2
timeout_s=8
# Long enough to outlast the fault (tiny steps take ~10 ms): the job must end by failing.
long=(--set model.preset=tiny --set model.channels=32 --set train.seq_len=16
      --set train.steps=100000 --set train.eval_every=0 --set train.micro_batch=2
      --set device.threads=1 --set zero.stage=3 --set zero.comm_timeout_s=$timeout_s)

# start TAG: the job in the background, 2 ranks per node; waits until it has done 3 steps.
start() {
  rm -f "$NODES_SHARED/$1.jsonl"
  NODES_TIMEOUT=120 nodes_mpirun node0:2,node1:2 -- "$strata" train "${long[@]}" \
    --metrics "$NODES_SHARED/$1.jsonl" > "$tmp/$1.log" 2>&1 &
  job=$!
  for _ in $(seq 300); do
    [ -f "$NODES_SHARED/$1.jsonl" ] && [ "$(wc -l < "$NODES_SHARED/$1.jsonl")" -ge 3 ] && return 0
    kill -0 "$job" 2> /dev/null || { cat "$tmp/$1.log"; fail "$1: the job ended before 3 steps"; }
    sleep 0.1
  done
  fail "$1: no 3 steps within 30 s"
}
# finish TAG LIMIT: waits for the job; sets elapsed (seconds since the fault) and checks
# that it ended non-zero within LIMIT seconds of the fault (so not by nodes_mpirun's 120 s
# timeout; mpirun's own status after a rank's SIGKILL is 137 too).
finish() {
  wait "$job"
  local status=$?
  elapsed=$(( $(date +%s) - fault_at ))
  echo "--- $1: mpirun exit $status, $elapsed s after the fault"
  grep -E "strata: error|mpirun noticed|ORTE has lost|lost communication" "$tmp/$1.log" | sed 's/^/    /'
  [ "$status" -ne 0 ] || fail "$1: the job reported success"
  [ "$elapsed" -le "$2" ] || fail "$1: the job took $elapsed s to end (limit $2 s)"
}

# A rank killed on node1.
start kill
fault_at=$(date +%s)
nodes_kill 1 strata > /dev/null || fail "kill: no strata process on node1"
finish kill 10
grep -qE "mpirun noticed that process rank [23] with PID [0-9]+ on node node1 exited on signal 9" \
  "$tmp/kill.log" || { tail -30 "$tmp/kill.log"; fail "kill: mpirun did not name the killed rank and node"; }

# node1's link cut.
start cut
fault_at=$(date +%s)
nodes_link 1 down
finish cut $((timeout_s + 30))
grep -qE "strata: error: rank [01] on host node0: .*${timeout_s} s \(zero.comm_timeout_s\): no answer from rank\(s\) [0-9, ]*[23]" \
  "$tmp/cut.log" || { tail -30 "$tmp/cut.log"; fail "cut: no strata error on node0 naming a rank of node1"; }
echo PASS
