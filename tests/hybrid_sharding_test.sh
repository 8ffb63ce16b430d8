#!/usr/bin/env bash
# Hybrid sharding (zero.shard_group=node) across processes: 4 ranks under mpirun playing 2
# nodes of 2 (STRATA_RANKS_PER_NODE=2). At stages 1-3 its per-step losses equal the flat
# (zero.shard_group=world) run's within a relative 1e-5 over the steps (the gradient sums
# are grouped by node, so their last bits differ: docs/placement.md), and are identical
# across stages 1-3 and with optimizer state and params on NVMe (one rank's swap files
# per world rank, never shared between two ranks of one host). Each step's metrics record
# counts bytes sent within and across nodes (comm_bytes): hybrid sends fewer across nodes
# than flat, and with all 4 ranks on one node nothing goes across. Refused: stage 0, a run
# whose communicator does not know the nodes (ranks as threads), and strata plan.
# Usage (from Bazel): hybrid_sharding_test.sh <path of strata>
set -uo pipefail
strata="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# Open MPI puts its session sockets under TMPDIR; Bazel's may be too long for a socket path.
TMPDIR="$(mktemp -d /tmp/strata_hybrid.XXXXXX)"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
steps=12
common=(--set model.preset=tiny --set model.channels=32 --set train.seq_len=16
        --set train.steps=$steps --set train.grad_accum=2 --set train.eval_every=0
        --set train.lr=3e-3 --set device.threads=1 --set zero.comm_timeout_s=60
        --set train.micro_batch=2)
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
# Column $2 of comm_bytes ("within_node" or "across_nodes") of every step.
bytes() { grep -o "\"$2\":[0-9]*" "$1" | cut -d: -f2; }
run() {  # run TAG RANKS_PER_NODE SETTINGS...: mpirun -np 4, metrics in $tmp/TAG.jsonl
  local tag="$1" k="$2"
  shift 2
  timeout 180 mpirun --allow-run-as-root --oversubscribe -np 4 -x STRATA_RANKS_PER_NODE="$k" \
    "$strata" train "${common[@]}" "$@" --metrics "$tmp/$tag.jsonl" > "$tmp/$tag.log" 2>&1 \
    || { tail -20 "$tmp/$tag.log"; fail "$tag"; }
  [ "$(losses "$tmp/$tag.jsonl" | wc -l)" -eq "$steps" ] || fail "$tag: not $steps steps"
}

for stage in 1 2 3; do
  run "world$stage" 2 --set zero.stage=$stage
  run "node$stage" 2 --set zero.stage=$stage --set zero.shard_group=node
  paste <(losses "$tmp/world$stage.jsonl") <(losses "$tmp/node$stage.jsonl") | awk -v st="$stage" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) { printf "stage %d step %d: %s vs %s\n", st, NR, $1, $2; bad = 1 }
      if (d > max) max = d }
    END { printf "stage %d: largest difference hybrid - flat %.3g\n", st, max; exit bad }' \
    || fail "stage $stage: hybrid losses differ from flat beyond 1e-5 relative"
  if [ "$stage" != 1 ]; then
    cmp -s <(losses "$tmp/node1.jsonl") <(losses "$tmp/node$stage.jsonl") \
      || fail "hybrid stage $stage losses are not identical to hybrid stage 1"
  fi
  # Bytes over the run (each step's count moves with the collectives posted in it: an
  # all-gather of updated params may be posted after the step's end, so single steps vary):
  # hybrid sends less across nodes and more within them than flat.
  paste <(bytes "$tmp/world$stage.jsonl" across_nodes) <(bytes "$tmp/node$stage.jsonl" across_nodes) \
    <(bytes "$tmp/world$stage.jsonl" within_node) <(bytes "$tmp/node$stage.jsonl" within_node) |
    awk -v st="$stage" -v steps="$steps" 'NF == 4 { a1 += $1; a2 += $2; w1 += $3; w2 += $4; n++ }
      END { printf "stage %d, %d steps, rank 0: flat %d B across + %d B within; hybrid %d B across + %d B within\n", st, n, a1, w1, a2, w2
            exit !(n == steps && a1 > 0 && a2 < a1 && w2 > w1) }' || fail "stage $stage: comm_bytes"
done
echo "hybrid sharding: stages 1-3 match flat within 1e-5, identical across stages"

# One node of 4: nothing crosses nodes.
run one_node 4 --set zero.stage=2
[ "$(bytes "$tmp/one_node.jsonl" across_nodes | sort -u)" = "0" ] || fail "one node: bytes across nodes"
cmp -s <(losses "$tmp/world2.jsonl") <(losses "$tmp/one_node.jsonl") \
  || fail "flat stage 2: the node layout changed the losses"

# Hybrid with the optimizer state and params on NVMe: every rank its own swap files.
mkdir -p "$tmp/swap"
run node_nvme 2 --set zero.stage=3 --set zero.shard_group=node --set zero.optimizer_tier=nvme \
  --set zero.param_tier=nvme --set zero.nvme_dir="$tmp/swap"
cmp -s <(losses "$tmp/node3.jsonl") <(losses "$tmp/node_nvme.jsonl") \
  || fail "hybrid stage 3 on nvme: losses differ from the device placement"
echo "hybrid sharding: one node sends nothing across; nvme placement identical"

# Refusals.
timeout 60 mpirun --allow-run-as-root --oversubscribe -np 4 -x STRATA_RANKS_PER_NODE=2 \
  "$strata" train "${common[@]}" --set zero.shard_group=node > "$tmp/stage0.log" 2>&1 \
  && fail "hybrid sharding at stage 0 ran"
grep -q "zero.shard_group=node needs zero.stage >= 1" "$tmp/stage0.log" || { cat "$tmp/stage0.log"; fail "stage 0: unclear error"; }
"$strata" train "${common[@]}" --set zero.world=2 --set zero.stage=1 --set zero.shard_group=node \
  > "$tmp/threads.log" 2>&1 && fail "hybrid sharding with ranks as threads ran"
grep -q "zero.shard_group=node needs a communicator that knows the nodes" "$tmp/threads.log" \
  || { cat "$tmp/threads.log"; fail "threads: unclear error"; }
"$strata" plan "${common[@]}" --set zero.stage=1 --set zero.shard_group=node \
  > "$tmp/plan.log" 2>&1 && fail "strata plan planned hybrid sharding"
grep -q "zero.shard_group=node shards within a node and replicates across nodes: plan it for a cluster" "$tmp/plan.log" \
  || { cat "$tmp/plan.log"; fail "plan: unclear error"; }
echo PASS
