#!/usr/bin/env bash
# strata on a Slurm cluster (slurm.sh: Debian's slurm-wlm with munge, slurmctld on node0 and
# `slurmd -N nodeK` in each simulated node of nodes.sh, proctrack/linuxproc, task/none):
#   - `srun --mpi=pmix -N 2 --ntasks-per-node=2 strata train` gives the losses of the same 4
#     ranks on one host under mpirun, bit for bit (stage 3, params and optimizer on NVMe in
#     each node's local directory);
#   - rank 0 logs the node layout, and every rank's local rank and memory share: under srun
#     they are those of mpirun with the same layout (local ranks 0-1 of 2 on each node, each
#     rank half of its node's memory: twice the share of 4 ranks on one node);
#   - a batch job (sbatch) whose script runs srun --mpi=pmix trains the same losses, and
#     strata run by the script itself (one process, no step) trains them as 4 threads;
#   - srun without PMIx (--mpi=none) is refused by every task, naming --mpi=pmix;
#   - without the Slurm packages it says SKIPPED (a failure where STRATA_MULTINODE_REQUIRED=1);
#   - the daemons (munged, slurmctld and its slurmscriptd, slurmd, any slurmstepd) and their
#     files are gone when the nodes are removed (at exit, whether the test passed or not).
# Usage (from Bazel): slurm_test.sh <strata> <nodes.sh> <slurm.sh>
set -uo pipefail
strata="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$2"
source "$3"
slurm_require
fail() { echo "FAIL: $*"; exit 1; }
start=$SECONDS
nodes_up 2

# Without the Slurm packages (a PATH without them): SKIPPED and success, or a failure where
# a skip is not allowed.
nobin="$NODES_DIR/no-slurm-bin"
mkdir -p "$nobin"
for tool in ip unshare id; do ln -s "$(command -v "$tool")" "$nobin/$tool"; done
require() { PATH="$nobin" "$BASH" -c "source '$2'; source '$3'; slurm_require; echo not skipped" 2>&1; }
out="$(STRATA_MULTINODE_REQUIRED=0 require "$@")"
[ $? -eq 0 ] && [[ "$out" == "SKIPPED: a Slurm cluster needs"*"missing: munged slurmctld slurmd srun sinfo"* ]] \
  || fail "without Slurm: '$out'"
out="$(STRATA_MULTINODE_REQUIRED=1 require "$@")"
[ $? -ne 0 ] && [[ "$out" == *"a skip is a failure here"* ]] || fail "without Slurm, required: '$out'"
slurm_up 2
echo "cluster up in $((SECONDS - start)) s: $(on_node 0 sinfo -h -N -o '%N:%T' | sort -u | tr '\n' ' ')"
tmp="${TEST_TMPDIR:-$NODES_DIR}"
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
# Swap files in each node's own directory (node-local NVMe).
mkdir -p "$(nodes_local_dir 0)/swap" "$(nodes_local_dir 1)/swap"
common=(--set model.preset=tiny --set model.channels=32 --set train.seq_len=16
        --set train.steps=12 --set train.grad_accum=2 --set train.eval_every=0
        --set train.lr=3e-3 --set device.threads=1 --set zero.comm_timeout_s=60
        --set train.micro_batch=2 --set zero.stage=3 --set zero.optimizer_tier=nvme
        --set zero.param_tier=nvme --set zero.nvme_dir="$NODES_LOCAL/swap")
export NODES_TIMEOUT=120

# check TAG: 12 steps in its metrics (rank 0 writes them to the shared directory).
check() {
  [ "$(losses "$NODES_SHARED/$1.jsonl" | wc -l)" -eq 12 ] || { tail -30 "$tmp/$1.log"; fail "$1: not 12 steps"; }
}
same() {  # same REF TAG: identical losses
  cmp -s <(losses "$NODES_SHARED/$1.jsonl") <(losses "$NODES_SHARED/$2.jsonl") || {
    paste <(losses "$NODES_SHARED/$1.jsonl") <(losses "$NODES_SHARED/$2.jsonl") | head -12
    fail "$2: losses differ from $1"
  }
  echo "$2: the losses of $1, bit for bit"
}
layout() { grep -o '[0-9] nodes\?: .*' "$tmp/$1.log" | head -1; }
shares() { grep -o 'node shares: .*' "$tmp/$1.log" | head -1 | cut -d' ' -f3-; }

# References: all 4 ranks on node0, and 2 per node, under mpirun.
nodes_mpirun node0:4 -- "$strata" train "${common[@]}" --metrics "$NODES_SHARED/one4.jsonl" \
  > "$tmp/one4.log" 2>&1 || { tail -30 "$tmp/one4.log"; fail "mpirun -H node0:4 failed"; }
check one4
nodes_mpirun node0:2,node1:2 -- "$strata" train "${common[@]}" \
  --metrics "$NODES_SHARED/mpirun22.jsonl" > "$tmp/mpirun22.log" 2>&1 \
  || { tail -30 "$tmp/mpirun22.log"; fail "mpirun -H node0:2,node1:2 failed"; }
check mpirun22

t0=$SECONDS
slurm_srun -N 2 --ntasks-per-node=2 -- "$strata" train "${common[@]}" \
  --metrics "$NODES_SHARED/srun.jsonl" > "$tmp/srun.log" 2>&1 \
  || { tail -30 "$tmp/srun.log"; slurm_logs; fail "srun --mpi=pmix -N 2 --ntasks-per-node=2 failed"; }
echo "srun: $((SECONDS - t0)) s"
check srun
same one4 srun

# Where the ranks were, as rank 0 found them: hosts, and each rank's local rank and tiers.
[ "$(layout srun)" = "2 nodes: node0 (ranks 0-1), node1 (ranks 2-3)" ] || fail "srun: layout '$(layout srun)'"
grep -q "MPI's grouping of ranks into nodes differs" "$tmp/srun.log" && fail "srun: $(grep -m1 grouping "$tmp/srun.log")"
srun_shares="$(shares srun)"
echo "srun: node shares: $srun_shares"
share_re='each device ([0-9.]+ [KMGT]iB) \+ host ([0-9.]+ [KMGT]iB)'
[[ "$srun_shares" =~ ^node0:\ ranks\ 0-1\ \(local\ ranks\ 0-1\ of\ 2\),\ $share_re\;\ node1:\ ranks\ 2-3\ \(local\ ranks\ 0-1\ of\ 2\),\ $share_re$ ]] \
  || fail "srun: node shares '$srun_shares'"
[ "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}" = "${BASH_REMATCH[3]} ${BASH_REMATCH[4]}" ] \
  || fail "srun: the two nodes' ranks got different tiers: $srun_shares"
srun_device="${BASH_REMATCH[1]}" srun_host="${BASH_REMATCH[2]}"
[ "$srun_shares" = "$(shares mpirun22)" ] \
  || fail "srun's node shares '$srun_shares' differ from mpirun's with the same layout '$(shares mpirun22)'"
one4_shares="$(shares one4)"
[[ "$one4_shares" =~ ^node0:\ ranks\ 0-3\ \(local\ ranks\ 0-3\ of\ 4\),\ $share_re$ ]] \
  || fail "one4: node shares '$one4_shares'"
# A rank's two tiers together are its share of the node's memory (device.memory_limit and
# tiers.host_memory_limit at their defaults): 2 ranks per node get twice what 4 do, to the
# rounding of the printed sizes.
per_rank() {  # per_rank "5.15 GiB" "5.15 GiB": their sum in GiB
  awk -v a="$1" -v b="$2" 'function gib(t,  f) { split(t, f, " ");
    return f[1] * (f[2] == "KiB" ? 2^-20 : f[2] == "MiB" ? 2^-10 : f[2] == "TiB" ? 1024 : 1) }
    BEGIN { printf "%.4f", gib(a) + gib(b) }'
}
srun_total="$(per_rank "$srun_device" "$srun_host")"
one4_total="$(per_rank "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")"
awk -v a="$srun_total" -v b="$one4_total" 'BEGIN { r = a / (2 * b); exit !(r > 0.995 && r < 1.005) }' \
  || fail "srun: a rank's tiers ($srun_total GiB) are not twice those of 4 ranks on one node ($one4_total GiB)"
echo "srun: each rank's share ${srun_total} GiB = 2 x ${one4_total} GiB (4 ranks on one node)"

# A batch job. Its script is one process (it sees the allocation's 4 tasks, but no step):
# strata run there directly is not MPI, and runs zero.world=4 ranks as threads; under srun
# the ranks are srun's tasks on both nodes.
cat > "$NODES_SHARED/job.sh" << EOF
#!/usr/bin/env bash
$(printf '%q ' "$strata" train "${common[@]}") --set zero.world=4 \
  --metrics "$NODES_SHARED/batch-threads.jsonl" > "$tmp/batch-threads.log" 2>&1 || exit 1
srun --mpi=pmix $(printf '%q ' "$strata" train "${common[@]}") --metrics "$NODES_SHARED/sbatch.jsonl"
EOF
chmod +x "$NODES_SHARED/job.sh"
t0=$SECONDS
job="$(slurm_client sbatch --parsable -N 2 --ntasks-per-node=2 -o "$tmp/sbatch.log" \
  "$NODES_SHARED/job.sh" 2> "$tmp/sbatch.out")" || { cat "$tmp/sbatch.out"; fail "sbatch failed"; }
# Polled here rather than with sbatch --wait, which looks every few seconds.
while [ -n "$(on_node 0 squeue -h -j "$job" 2> /dev/null)" ]; do
  [ $((SECONDS - t0)) -lt "$NODES_TIMEOUT" ] || fail "batch job $job still queued or running"
  sleep 0.3
done
state="$(on_node 0 scontrol show job "$job" | grep -o 'JobState=[A-Z]*')"
[ "$state" = "JobState=COMPLETED" ] || { tail -30 "$tmp/sbatch.log"; fail "batch job $job: $state"; }
echo "sbatch: job $job completed in $((SECONDS - t0)) s"
check sbatch
same one4 sbatch
[ "$(layout sbatch)" = "2 nodes: node0 (ranks 0-1), node1 (ranks 2-3)" ] || fail "sbatch: layout '$(layout sbatch)'"
check batch-threads
same one4 batch-threads
grep -q "ranks: 4 (local rank 0 of 4)" "$tmp/batch-threads.log" \
  || fail "the batch script's strata: $(grep -m1 'ranks: ' "$tmp/batch-threads.log")"
[ "$(layout batch-threads)" = "1 node: node0 (ranks 0-3)" ] || fail "batch-threads: layout '$(layout batch-threads)'"

# srun without PMIx: every task refuses, naming the fix (not Open MPI's abort).
slurm_srun -N 2 --ntasks-per-node=2 --mpi=none -- "$strata" train "${common[@]}" \
  > "$tmp/nopmix.log" 2>&1 && fail "srun --mpi=none trained"
[ "$(grep -c 'srun started 4 tasks without PMIx (srun --mpi=none), so they cannot join one MPI job: run srun --mpi=pmix' "$tmp/nopmix.log")" = 4 ] \
  || { cat "$tmp/nopmix.log"; fail "srun --mpi=none: not every task named --mpi=pmix"; }

# Everything the cluster started ends with the nodes (the exit trap does this too).
daemons="$(for k in 0 1; do ip netns pids "$(nodes_ns "$k")"; done | sort -n | tr '\n' ' ')"
# (A finished job's slurmstepd may still be exiting: not counted.)
names="$(for p in $daemons; do cat "/proc/$p/comm" 2> /dev/null; done | grep -vx slurmstepd \
  | sort -u | tr '\n' ' ')"
[ "$names" = "munged slurmctld slurmd slurmscriptd " ] \
  || fail "the nodes run '$names', expected munged, slurmctld (and its slurmscriptd), slurmd"
dir="$NODES_DIR"
nodes_down
alive() {  # the processes of $daemons still running (a zombie has ended)
  local p
  for p in $daemons; do
    [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2> /dev/null)" != Z ] && echo "$p"
  done
}
for _ in $(seq 50); do [ -z "$(alive)" ] && break; sleep 0.1; done
[ -z "$(alive)" ] || fail "processes outlived the nodes: $(alive | tr "\n" " ")"
[ -e "$dir" ] && fail "$dir left behind"
echo "PASS ($((SECONDS - start)) s)"
