#!/usr/bin/env bash
# ZeRO stages across processes: `mpirun -np N strata train` (MPI communicator, one process
# per rank) at N = 2 and 4 for stages 0-3 gives the per-step losses of the single-rank
# stage-0 run on the same global batch (micro_batch * N rows), within a relative 2e-5 over
# 20 steps (the GEMMs split their sums differently); stages at one N agree exactly, and so
# do the host (offload) and nvme (infinity) placements with the device one.
set -uo pipefail
strata="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
common=(--set model.preset=tiny --set model.channels=32 --set train.seq_len=16
        --set train.steps=20 --set train.grad_accum=2 --set train.eval_every=0
        --set train.lr=3e-3 --set device.threads=1 --set zero.comm_timeout_s=60)
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }

for np in 2 4; do
  "$strata" train "${common[@]}" --set train.micro_batch=$((2 * np)) \
    --metrics "$tmp/ref$np.jsonl" > "$tmp/ref$np.log" 2>&1 || { cat "$tmp/ref$np.log"; fail "reference"; }
  for stage in 0 1 2 3; do
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" \
      "$strata" train "${common[@]}" --set train.micro_batch=2 --set zero.stage=$stage \
      --metrics "$tmp/s$stage-$np.jsonl" > "$tmp/s$stage-$np.log" 2>&1 \
      || { tail -20 "$tmp/s$stage-$np.log"; fail "mpirun -np $np stage $stage"; }
    [ "$(losses "$tmp/s$stage-$np.jsonl" | wc -l)" -eq 20 ] || fail "np $np stage $stage: not 20 steps"
    paste <(losses "$tmp/ref$np.jsonl") <(losses "$tmp/s$stage-$np.jsonl") | awk -v np="$np" -v st="$stage" '
      { d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) { printf "np %d stage %d step %d: %s vs %s\n", np, st, NR, $1, $2; bad = 1 } }
      END { exit bad }' || fail "losses differ from the single-rank run"
    if [ "$stage" != 0 ]; then
      cmp -s <(losses "$tmp/s0-$np.jsonl") <(losses "$tmp/s$stage-$np.jsonl") \
        || fail "np $np: stage $stage losses are not identical to stage 0"
    fi
    grep -q "rank 0/$np" "$tmp/s$stage-$np.log" || fail "no rank-prefixed log of rank 0/$np"
  done
  echo "np $np: stages 0-3 match the single-rank run"
done

# Offload and NVMe placements across processes (np 2): the same losses as the device
# placement at the same stage, exactly (same CPU Adam, same sums); each rank its own
# swap files, removed at exit.
mkdir -p "$tmp/swap"
for placement in "2 zero.optimizer_tier=host zero.grad_tier=host" \
                 "3 zero.optimizer_tier=nvme zero.param_tier=nvme" \
                 "3 zero.optimizer_tier=nvme zero.param_tier=nvme zero.grad_tier=nvme" \
                 "3 zero.optimizer_tier=host zero.grad_tier=host zero.param_tier=host"; do
  read -r stage keys <<< "$placement"
  sets=(--set zero.stage=$stage --set zero.nvme_dir="$tmp/swap")
  for key in $keys; do sets+=(--set "$key"); done
  tag="p$stage-${keys// /_}"
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
    "$strata" train "${common[@]}" --set train.micro_batch=2 "${sets[@]}" \
    --metrics "$tmp/$tag.jsonl" > "$tmp/$tag.log" 2>&1 \
    || { tail -20 "$tmp/$tag.log"; fail "mpirun -np 2 $placement"; }
  cmp -s <(losses "$tmp/s$stage-2.jsonl") <(losses "$tmp/$tag.jsonl") \
    || fail "np 2 stage $stage $keys: losses differ from the device placement"
  [ -z "$(ls -A "$tmp/swap")" ] || fail "swap files left behind after $placement"
done
echo "np 2: host and nvme placements match the device placement"

# The delayed parameter update across processes: the same losses as with its ranks as
# threads (the norm is reduced in the background there too).
delayed=(--set zero.stage=2 --set zero.optimizer_tier=host --set zero.grad_tier=host
         --set zero.param_update=delayed --set train.micro_batch=2)
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$strata" train "${common[@]}" "${delayed[@]}" --metrics "$tmp/dpu-mpi.jsonl" \
  > "$tmp/dpu-mpi.log" 2>&1 || { tail -20 "$tmp/dpu-mpi.log"; fail "mpirun -np 2 delayed"; }
"$strata" train "${common[@]}" "${delayed[@]}" --set zero.world=2 \
  --metrics "$tmp/dpu-threads.jsonl" > "$tmp/dpu-threads.log" 2>&1 \
  || { tail -20 "$tmp/dpu-threads.log"; fail "delayed update, ranks as threads"; }
[ "$(losses "$tmp/dpu-mpi.jsonl" | wc -l)" -eq 20 ] || fail "delayed: not 20 steps"
cmp -s <(losses "$tmp/dpu-threads.jsonl") <(losses "$tmp/dpu-mpi.jsonl") \
  || fail "np 2 delayed update: losses differ from the same run with threads"
cmp -s <(losses "$tmp/s2-2.jsonl") <(losses "$tmp/dpu-mpi.jsonl") \
  && fail "the delayed update trained exactly like the exact one"
echo "np 2: the delayed update matches its threads run"

# Checkpoints across processes: written at stage 1 after step 10 (rank 0 writes what
# every rank gathers), resumed at stage 3 with everything on NVMe: steps 11-20 give the
# uninterrupted np 2 losses exactly.
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$strata" train "${common[@]}" --set train.micro_batch=2 --set zero.stage=1 \
  --set train.checkpoint_dir="$tmp/mck" --set train.checkpoint_every=10 \
  > "$tmp/mck.log" 2>&1 || { tail -20 "$tmp/mck.log"; fail "mpirun -np 2 checkpointing"; }
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$strata" train "${common[@]}" --set train.micro_batch=2 --set zero.stage=3 \
  --set zero.optimizer_tier=nvme --set zero.param_tier=nvme --set zero.nvme_dir="$tmp/swap" \
  --set train.resume="$tmp/mck/step-10" --metrics "$tmp/mres.jsonl" > "$tmp/mres.log" 2>&1 \
  || { tail -20 "$tmp/mres.log"; fail "mpirun -np 2 resume"; }
cmp -s <(losses "$tmp/s0-2.jsonl" | tail -10) <(losses "$tmp/mres.jsonl") \
  || fail "np 2: the resumed run's losses differ from the uninterrupted run's"
echo "np 2: a checkpoint resumes across stages and placements"

# Background checkpoints across processes (train.checkpoint_async; the optimizer state on
# NVMe, read from the swap files by the snapshot; 1 MiB of buffers): the run's losses are
# the uninterrupted ones, and a resume from step-5 gives steps 6-20 exactly.
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$strata" train "${common[@]}" --set train.micro_batch=2 --set zero.stage=2 \
  --set zero.optimizer_tier=nvme --set zero.nvme_dir="$tmp/swap" \
  --set train.checkpoint_dir="$tmp/ack" --set train.checkpoint_every=5 \
  --set train.checkpoint_async=true --set train.checkpoint_buffer_bytes=1MiB \
  --metrics "$tmp/ack.jsonl" > "$tmp/ack.log" 2>&1 \
  || { tail -20 "$tmp/ack.log"; fail "mpirun -np 2 background checkpoints"; }
for k in 5 10 15 20; do
  [[ -f "$tmp/ack/step-$k/checkpoint.json" ]] || fail "np 2 background: no step-$k manifest"
done
cmp -s <(losses "$tmp/s0-2.jsonl") <(losses "$tmp/ack.jsonl") \
  || fail "np 2 background checkpoints: losses differ from the run without checkpoints"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$strata" train "${common[@]}" --set train.micro_batch=2 --set zero.stage=3 \
  --set train.resume="$tmp/ack/step-5" --metrics "$tmp/ares.jsonl" > "$tmp/ares.log" 2>&1 \
  || { tail -20 "$tmp/ares.log"; fail "mpirun -np 2 resume from a background checkpoint"; }
cmp -s <(losses "$tmp/s0-2.jsonl" | tail -15) <(losses "$tmp/ares.jsonl") \
  || fail "np 2: the run resumed from a background checkpoint differs from the uninterrupted run"
echo "np 2: background checkpoints complete on every rank and resume exactly"

# zero.world that disagrees with mpirun is rejected before any work.
timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$strata" train "${common[@]}" \
  --set zero.world=3 > "$tmp/bad.log" 2>&1 && fail "zero.world=3 under -np 2 should fail"
grep -q "zero.world=3 but mpirun started 2 ranks" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "unclear error"; }

# Content, not only configuration text (session/content_agreement.h): each rank runs in its
# own directory ("node"), so one relative path names a different file per rank. Different
# data, and a checkpoint directory that holds step 10 on one node and nothing on the other,
# are refused before any step, naming the input, the ranks with their hosts and the paths.
for r in 0 1; do mkdir -p "$tmp/node$r/ck"; done
for i in $(seq 300); do echo "the quick brown fox $i"; done > "$tmp/node0/train.txt"
for i in $(seq 300); do echo "a slow red hen $i"; done > "$tmp/node1/train.txt"
absolute="$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata")"
per_node() {  # runs strata train in node<rank>/ under mpirun -np 2
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 bash -c \
    "cd '$tmp'/node\$OMPI_COMM_WORLD_RANK && exec '$absolute' train $*"
}
per_node "${common[@]}" --set data.path=train.txt > "$tmp/content.log" 2>&1 \
  && fail "different data on two nodes trained"
for words in "data.path is not the same on every rank" "rank 0 on" "rank 1 on" "train.txt (identity"; do
  grep -qF "$words" "$tmp/content.log" || { cat "$tmp/content.log"; fail "no '$words'"; }
done
cp "$tmp/node0/train.txt" "$tmp/node1/train.txt"
cp -r "$tmp/mck/step-10" "$tmp/node0/ck/"
per_node "${common[@]}" --set data.path=train.txt --set train.resume=ck > "$tmp/resume.log" 2>&1 \
  && fail "a checkpoint on one node only resumed"
for words in "train.resume is not the same on every rank" "ck/step-10 (identity" "rank 1 on" \
             "ck (checkpoint: no checkpoint at ck"; do
  grep -qF "$words" "$tmp/resume.log" || { cat "$tmp/resume.log"; fail "no '$words'"; }
done
cp -r "$tmp/mck/step-10" "$tmp/node1/ck/"
per_node "${common[@]}" --set data.path=train.txt --set train.resume=ck > "$tmp/resume2.log" 2>&1 \
  || { tail -20 "$tmp/resume2.log"; fail "the same checkpoint on both nodes did not resume"; }
grep -q "1 node: " "$tmp/resume2.log" || fail "no node layout in the log"
echo "np 2: ranks that would read different content at one path are refused, naming them"
# A resume that fails: each rank prints its own error, once, before the others learn of
# it (so mpirun tearing the job down cannot swallow it), three times over.
cp -r "$tmp/mck/step-10" "$tmp/bad-step"
printf '\x7f' | dd of="$tmp/bad-step/rank-00001.bin" bs=1 seek=100 conv=notrunc status=none
for try in 1 2 3; do
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$strata" train "${common[@]}" \
    --set train.micro_batch=2 --set train.resume="$tmp/bad-step" > "$tmp/badres.log" 2>&1 \
    && fail "a damaged checkpoint resumed"
  for r in 0 1; do
    [ "$(grep -c "strata: error: rank $r on host .*rank-00001.bin: checksum mismatch" "$tmp/badres.log")" -eq 1 ] \
      || { cat "$tmp/badres.log"; fail "try $try: rank $r's own error not printed exactly once"; }
  done
done
echo "np 2: a failed resume prints each rank's own error once"

# Node-local checkpoint directories on two hosts: each rank runs as host node<r> (a UTS
# namespace of its own) in a directory of its own, so one relative checkpoint_dir is a
# different directory per "node". Each node gets its own rank's file and the same manifest
# (the lowest rank on each host writes it); resumed at stages 3 and 1 (each rank reads its
# own shard, from its own file) the run goes on with the uninterrupted run's losses; at
# stage 0 (every rank reads everything) the missing file is named with both hosts.
if unshare --uts true 2>/dev/null; then
  for r in 0 1; do mkdir -p "$tmp/host$r"; cp "$tmp/node0/train.txt" "$tmp/host$r/"; done
  cat > "$tmp/as_host.sh" <<EOF
#!/bin/sh
cd "$tmp/host\$OMPI_COMM_WORLD_RANK" || exit 1
exec unshare --uts sh -c 'hostname "node\$OMPI_COMM_WORLD_RANK" && exec "\$0" "\$@"' "$absolute" train "\$@"
EOF
  chmod +x "$tmp/as_host.sh"
  per_host() { timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 "$tmp/as_host.sh" "$@"; }
  hosts=("${common[@]}" --set data.path=train.txt --set train.micro_batch=2)
  per_host "${hosts[@]}" --set zero.stage=3 --set train.checkpoint_dir=ck \
    --set train.checkpoint_every=10 --metrics "$tmp/hosts.jsonl" > "$tmp/hosts.log" 2>&1 \
    || { tail -20 "$tmp/hosts.log"; fail "np 2 on two hosts: checkpointing"; }
  step0="$tmp/host0/ck/step-10" step1="$tmp/host1/ck/step-10"
  [ -f "$step0/rank-00000.bin" ] && [ ! -e "$step0/rank-00001.bin" ] &&
    [ -f "$step1/rank-00001.bin" ] && [ ! -e "$step1/rank-00000.bin" ] ||
    fail "two hosts: each node should hold its own rank's file only"
  cmp -s "$step0/checkpoint.json" "$step1/checkpoint.json" || fail "two hosts: the manifests differ"
  grep -q '"host": "node1"' "$step0/checkpoint.json" || fail "two hosts: rank 1's host not recorded"
  for stage in 3 1; do
    per_host "${hosts[@]}" --set zero.stage=$stage --set train.resume=ck/step-10 \
      --metrics "$tmp/hosts-res$stage.jsonl" > "$tmp/hosts-res.log" 2>&1 \
      || { tail -20 "$tmp/hosts-res.log"; fail "two hosts: resume at stage $stage"; }
    cmp -s <(losses "$tmp/hosts.jsonl" | tail -10) <(losses "$tmp/hosts-res$stage.jsonl") \
      || fail "two hosts: the losses resumed at stage $stage differ"
  done
  per_host "${hosts[@]}" --set zero.stage=0 --set train.resume=ck/step-10 > "$tmp/hosts-bad.log" 2>&1 \
    && fail "two hosts: stage 0 resumed without the other node's file"
  grep -q "rank-00001.bin is missing on host node0 (written by rank 1 on host node1" \
    "$tmp/hosts-bad.log" || { cat "$tmp/hosts-bad.log"; fail "two hosts: the missing file not named"; }
  echo "np 2 on two hosts: node-local checkpoints, each node its ranks' files and a manifest"
else
  echo "SKIP: two hosts (unshare --uts not permitted here)"
fi
echo PASS
