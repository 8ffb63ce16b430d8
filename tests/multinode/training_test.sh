#!/usr/bin/env bash
# Training across simulated nodes (nodes.sh: network namespaces, TCP between them, ranks
# started by mpirun through an rsh agent) gives the losses of the same run with all its
# ranks on one host, bit for bit, at every stage and placement tried. Pairwise rather than
# the full cross-product: each line below is one run on the nodes, compared with the
# one-host run of its world size (stages and placements agree exactly at one world size:
# tests/mpi_equivalence_test.sh).
#   2 nodes x 1 rank   stage 1, everything on the device
#   2 nodes x 2 ranks  stage 3, params and optimizer on NVMe in each node's local directory
#   2 nodes x 1 rank   stage 2, optimizer state and gradients in host RAM (ZeRO-Offload)
#   3 nodes x 1 rank   stage 3, optimizer on NVMe in the shared directory, 2+1 ranks per node
# Usage (from Bazel): training_test.sh <strata> <nodes.sh> (runs.sh beside it)
set -uo pipefail
source "$(dirname "$2")/runs.sh"
runs_start "$1" 3
same() {  # same REF TAG: identical losses
  cmp -s <(losses "$NODES_SHARED/$1.jsonl") <(losses "$NODES_SHARED/$2.jsonl") || {
    paste <(losses "$NODES_SHARED/$1.jsonl") <(losses "$NODES_SHARED/$2.jsonl") | head -12
    fail "$2: losses differ from $1 (all ranks on one host)"
  }
  echo "$2: the losses of $1, bit for bit"
}

# References: every rank on node0.
run one2 node0:2 --set zero.stage=1
run one4 node0:4 --set zero.stage=1
run one3 node0:3 --set zero.stage=1

run two-s1 node0:1,node1:1 --set zero.stage=1
same one2 two-s1

# Node-local swap: the directory exists on node0 only, so node1's ranks refuse it by name.
mkdir -p "$(nodes_local_dir 0)/swap"
NODES_TIMEOUT=60 nodes_mpirun node0:2,node1:2 -- "$strata" train "${common[@]}" \
  --set zero.stage=3 --set zero.optimizer_tier=nvme --set zero.nvme_dir="$NODES_LOCAL/swap" \
  > "$tmp/noswap.log" 2>&1 && fail "a swap directory missing on node1 was used"
# A rank of node1 names it (the other may be aborted by the first before it reports its
# own); no rank of node0 does.
grep -qE "rank [23] on host node1: zero.nvme_dir $NODES_LOCAL/swap: No such file" "$tmp/noswap.log" \
  || { cat "$tmp/noswap.log"; fail "no error of a node1 rank naming node1 and the directory"; }
grep -qE "rank [01] on host node0: zero.nvme_dir" "$tmp/noswap.log" \
  && { cat "$tmp/noswap.log"; fail "a rank of node0 refused its swap directory"; }
mkdir -p "$(nodes_local_dir 1)/swap"
run two-s3-nvme node0:2,node1:2 --set zero.stage=3 --set zero.optimizer_tier=nvme \
  --set zero.param_tier=nvme --set zero.nvme_dir="$NODES_LOCAL/swap"
same one4 two-s3-nvme
for k in 0 1; do  # each node's swap files were removed at exit
  [ -z "$(ls -A "$(nodes_local_dir "$k")/swap")" ] || fail "node$k: swap files left behind"
done

run two-s2-offload node0:1,node1:1 --set zero.stage=2 --set zero.optimizer_tier=host \
  --set zero.grad_tier=host
same one2 two-s2-offload

mkdir -p "$NODES_SHARED/swap"
run three-s3 node0:1,node1:1,node2:1 --set zero.stage=3 --set zero.optimizer_tier=nvme \
  --set zero.nvme_dir="$NODES_SHARED/swap"
same one3 three-s3

# The ranks really were on the nodes named (rank 0 logs the node layout it found).
layout() { grep -o '[0-9] nodes\?: .*' "$tmp/$1.log" | head -1; }
[ "$(layout two-s3-nvme)" = "2 nodes: node0 (ranks 0-1), node1 (ranks 2-3)" ] \
  || fail "two-s3-nvme: layout '$(layout two-s3-nvme)'"
[ "$(layout three-s3)" = "3 nodes: node0 (rank 0), node1 (rank 1), node2 (rank 2)" ] \
  || fail "three-s3: layout '$(layout three-s3)'"
[ "$(layout one4)" = "1 node: node0 (ranks 0-3)" ] || fail "one4: layout '$(layout one4)'"
echo PASS
