#!/usr/bin/env bash
# Checkpoints across simulated nodes, in node-local and shared directories (format 6: each
# rank writes its own file, the lowest rank of each host a manifest; docs/checkpoints.md):
#   node-local: 2 nodes x 2 ranks write at step 6 (stage 1); each node holds its two ranks'
#     files and a manifest, no other rank's; the same layout resumes at stage 3 with the
#     optimizer on NVMe and gives the uninterrupted run's losses for steps 7-12, bit for bit;
#     a layout that puts rank 1 on node1 is refused naming the missing file and its host.
#   shared: 2 nodes x 2 ranks write, 3 nodes x 1 rank + node0 x 1 (world 4, another layout)
#     resume: every file is found, the same losses bit for bit; one manifest.
# Usage (from Bazel): checkpoint_test.sh <strata> <nodes.sh> (runs.sh beside it)
set -uo pipefail
source "$(dirname "$2")/runs.sh"
runs_start "$1" 3
same_tail() {  # same_tail REF TAG: TAG's losses are REF's last six
  cmp -s <(losses "$NODES_SHARED/$1.jsonl" | tail -6) <(losses "$NODES_SHARED/$2.jsonl") || {
    paste <(losses "$NODES_SHARED/$1.jsonl" | tail -6) <(losses "$NODES_SHARED/$2.jsonl")
    fail "$2: the resumed losses differ from $1's steps 7-12"
  }
  echo "$2: steps 7-12 of $1, bit for bit"
}

run whole node0:2,node1:2 --set zero.stage=1

# Node-local.
run local-write node0:2,node1:2 --set zero.stage=1 --set train.steps=6 \
  --set train.checkpoint_dir="$NODES_LOCAL/ck" --set train.checkpoint_every=6
for k in 0 1; do
  have="$(cd "$(nodes_local_dir "$k")/ck/step-6" && ls | grep -v '^tokenizer$' | tr '\n' ' ')"
  want="$(printf 'checkpoint.json rank-%05d.bin rank-%05d.bin ' $((2 * k)) $((2 * k + 1)))"
  [ "$have" = "$want" ] || fail "node$k's step-6 holds '$have', expected '$want'"
done
cmp -s "$(nodes_local_dir 0)/ck/step-6/checkpoint.json" "$(nodes_local_dir 1)/ck/step-6/checkpoint.json" \
  || fail "the two nodes' manifests differ"
mkdir -p "$(nodes_local_dir 0)/swap" "$(nodes_local_dir 1)/swap"
run local-resume node0:2,node1:2 --set zero.stage=3 --set zero.optimizer_tier=nvme \
  --set zero.nvme_dir="$NODES_LOCAL/swap" --set train.resume="$NODES_LOCAL/ck/step-6"
same_tail whole local-resume
NODES_TIMEOUT=60 nodes_mpirun node0:1,node1:3 -- "$strata" train "${common[@]}" \
  --set zero.stage=1 --set train.resume="$NODES_LOCAL/ck/step-6" > "$tmp/moved.log" 2>&1 \
  && fail "a layout without rank 1's file on node1 resumed"
grep -q "rank-00001.bin is missing on host node1 (written by rank 1 on host node0" "$tmp/moved.log" \
  || { grep -i "error" "$tmp/moved.log" | head; fail "the error does not name the missing file and hosts"; }

# Shared.
run shared-write node0:2,node1:2 --set zero.stage=1 --set train.steps=6 \
  --set train.checkpoint_dir="$NODES_SHARED/ck" --set train.checkpoint_every=6
[ "$(cd "$NODES_SHARED/ck/step-6" && ls | grep -v '^tokenizer$' | tr '\n' ' ')" \
  = "checkpoint.json rank-00000.bin rank-00001.bin rank-00002.bin rank-00003.bin " ] \
  || fail "the shared step-6 holds $(ls "$NODES_SHARED/ck/step-6")"
run shared-resume node0:2,node1:1,node2:1 --set zero.stage=2 \
  --set train.resume="$NODES_SHARED/ck/step-6"
same_tail whole shared-resume
echo PASS
