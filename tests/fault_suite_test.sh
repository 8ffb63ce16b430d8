#!/usr/bin/env bash
# The fault suite: faults injected deterministically (STRATA_FAULT_SIGNAL in the training
# loop, STRATA_FAULT_CHECKPOINT in the checkpoint writer, STRATA_FAULT_NVME in the I/O
# engine; no sleeps or races decide an outcome), each case under a timeout, each asserting
# its exit code and message, that no swap, lock or partial checkpoint file is left, and,
# where a checkpoint exists, that resuming gives the losses of the uninterrupted run.
# Usage: fault_suite_test.sh STRATA
set -uo pipefail
strata="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
T="${TEST_TMPDIR:-$(mktemp -d)}/faults"
rm -rf "$T"
mkdir -p "$T"
failures=0
cases=0
STEPS=8
BASE=(train --set model.preset=tiny --set train.steps=$STEPS --set train.eval_every=0
      --set zero.stage=3 --set zero.optimizer_tier=nvme --set zero.param_tier=nvme
      --set nvme.chunk_bytes=16KiB)

fail() { failures=$((failures + 1)); echo "FAIL: $case_name: $*"; }
# Runs strata under a timeout with the case's environment; output in $T/$case_name.txt.
run() { timeout 120 env "$@" > "$T/$case_name.txt" 2>&1 < /dev/null; }
expect_rc() { [[ "$1" == "$2" ]] || { fail "exit $1, expected $2"; tail -5 "$T/$case_name.txt"; }; }
expect_text() { grep -qF -- "$1" "$T/$case_name.txt" || fail "no '$1' in the output"; }
# Nothing of a run left in these directories (swap, lock, partial checkpoints).
expect_clean() {
  local left
  left="$(find "$@" \( -name '*.swap' -o -name 'strata-*.lock' -o -name '.strata-*' \
          -o -name '*.partial' \) -print 2>/dev/null)"
  [[ -z "$left" ]] || fail "left behind: $left"
  # A checkpoint directory without its manifest (format 6: written last) is a partial one.
  local step
  for step in $(find "$@" -type d -name 'step-*' 2>/dev/null); do
    [[ -f "$step/checkpoint.json" ]] || fail "left behind: $step without its checkpoint.json"
  done
}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
begin() { case_name="$1"; cases=$((cases + 1)); mkdir -p "$T/$case_name/swap"; }

# The uninterrupted run every resumed one is compared with.
begin reference
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$T/reference/swap" --metrics "$T/reference/m.jsonl"
expect_rc $? 0
expect_clean "$T/reference"
reference_losses="$(losses "$T/reference/m.jsonl")"

# 1. SIGINT: stops after the step in flight, no checkpoint on SIGINT, exit 130.
begin sigint
d="$T/sigint"
run STRATA_FAULT_SIGNAL=SIGINT@3 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --metrics "$d/m.jsonl"
expect_rc $? 130
expect_text "interrupted by SIGINT after step 3 of $STEPS; last checkpoint: none"
[[ "$(wc -l < "$d/m.jsonl")" == 3 ]] || fail "metrics has $(wc -l < "$d/m.jsonl") lines, expected 3"
[[ ! -e "$d/ck/step-3" ]] || fail "SIGINT wrote a checkpoint"
expect_clean "$d"

# 2. SIGTERM: a checkpoint of the last finished step, exit 143; resuming gives the
#    uninterrupted run's losses.
begin sigterm
d="$T/sigterm"
run STRATA_FAULT_SIGNAL=SIGTERM@5 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --metrics "$d/m.jsonl"
expect_rc $? 143
expect_text "last checkpoint: $d/ck/step-5 (written on SIGTERM)"
expect_clean "$d"
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.resume="$d/ck" --metrics "$d/m.jsonl"
expect_rc $? 0
[[ "$(losses "$d/m.jsonl")" == "$reference_losses" ]] || fail "resumed losses differ from the uninterrupted run"
expect_clean "$d"

# 3. A second SIGINT exits at once, still removing the swap files.
begin double_sigint
d="$T/double_sigint"
run STRATA_FAULT_SIGNAL='SIGINT*2@2' "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 130
expect_text "SIGINT: stopped at once; its unfinished files"
expect_clean "$d"

# 4. SIGHUP (a closed terminal): like SIGINT, exit 129.
begin sighup
d="$T/sighup"
run STRATA_FAULT_SIGNAL=SIGHUP@1 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 129
expect_text "interrupted by SIGHUP after step 1"
expect_clean "$d"

# 5. A broken pipe (strata train | head) stops the run cleanly, exit 141.
begin sigpipe
d="$T/sigpipe"
timeout 120 "$strata" "${BASE[@]}" --set train.steps=100000 --set zero.nvme_dir="$d/swap" 2>&1 \
  < /dev/null | head -n 3 > /dev/null
rc="${PIPESTATUS[0]}"
expect_rc "$rc" 141
expect_clean "$d"

# 6. kill -9 in the middle of writing a checkpoint: swap files, lock and step-6 without its
#    manifest stay; the next run in the same directories removes them, resumes from step-4
#    and reaches the uninterrupted run's losses.
begin kill_mid_checkpoint
d="$T/kill_mid_checkpoint"
run STRATA_FAULT_CHECKPOINT=kill@6:1 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --set train.checkpoint_every=2 --metrics "$d/m.jsonl"
expect_rc $? 137
[[ -f "$d/ck/step-6/rank-00000.bin" && ! -e "$d/ck/step-6/checkpoint.json" && -d "$d/ck/step-4" ]] \
  || fail "expected step-4 and step-6 without its manifest"
[[ -n "$(find "$d/swap" -name '*.swap')" ]] || fail "a SIGKILL cannot remove swap files; none found"
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.checkpoint_every=2 --set train.resume="$d/ck" --metrics "$d/resumed.jsonl"
expect_rc $? 0
expect_text "removed $d/ck/step-6, a checkpoint an earlier run did not finish"
expect_text "leftover file(s) of crashed runs"
[[ "$(losses "$d/m.jsonl" | head -4; losses "$d/resumed.jsonl")" == "$reference_losses" ]] \
  || fail "losses after the resume differ from the uninterrupted run"
expect_clean "$d"

# 6b. kill -9 after every rank file is durable, before the manifest: step-6 is not a
#     checkpoint; the resume goes on from step-4 with the uninterrupted run's losses.
begin kill_before_manifest
d="$T/kill_before_manifest"
run STRATA_FAULT_CHECKPOINT=kill@6:manifest "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --set train.checkpoint_every=2 --metrics "$d/m.jsonl"
expect_rc $? 137
[[ -f "$d/ck/step-6/rank-00000.bin" && ! -e "$d/ck/step-6/checkpoint.json" ]] \
  || fail "expected step-6's rank file without its manifest"
[[ -f "$d/ck/step-4/checkpoint.json" ]] || fail "step-4 is gone"
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.checkpoint_every=2 --set train.resume="$d/ck" --metrics "$d/resumed.jsonl"
expect_rc $? 0
expect_text "resumed from $d/ck/step-4"
[[ "$(losses "$d/m.jsonl" | head -4; losses "$d/resumed.jsonl")" == "$reference_losses" ]] \
  || fail "losses after the resume differ from the uninterrupted run"
expect_clean "$d"

# 6c. kill -9 after the manifest is durable, before checkpoint_keep=1 removes step-4: both
#     are complete; the resume goes on from step-6.
begin kill_before_keep
d="$T/kill_before_keep"
run STRATA_FAULT_CHECKPOINT=kill@6:keep "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --set train.checkpoint_every=2 \
  --set train.checkpoint_keep=1 --metrics "$d/m.jsonl"
expect_rc $? 137
[[ -f "$d/ck/step-6/checkpoint.json" && -f "$d/ck/step-4/checkpoint.json" ]] \
  || fail "expected step-4 and step-6 both complete"
[[ ! -e "$d/ck/step-2" ]] || fail "step-2 was not removed after step-4"
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.checkpoint_every=2 --set train.checkpoint_keep=1 --set train.resume="$d/ck" \
  --metrics "$d/resumed.jsonl"
expect_rc $? 0
expect_text "resumed from $d/ck/step-6"
# (step 6's record was not written: the run was killed inside it)
[[ "$(losses "$d/m.jsonl" | head -5; losses "$d/resumed.jsonl")" == \
   "$(echo "$reference_losses" | sed 6d)" ]] \
  || fail "losses after the resume differ from the uninterrupted run"
[[ ! -e "$d/ck/step-4" ]] || fail "checkpoint_keep=1 left step-4 after step-8"
expect_clean "$d"

# 6d. kill -9 while a background checkpoint (train.checkpoint_async) is written, its
#     snapshot read from the NVMe swap files and the writer going on during step 5: step-4
#     has no manifest, step-2 stays valid, and the resume reaches the uninterrupted losses.
begin kill_background_write
d="$T/kill_background_write"
ASYNC=(--set train.checkpoint_async=true --set train.checkpoint_buffer_bytes=1MiB)
run STRATA_FAULT_CHECKPOINT=kill@4:1 "$strata" "${BASE[@]}" "${ASYNC[@]}" \
  --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.checkpoint_every=2 --metrics "$d/m.jsonl"
expect_rc $? 137
[[ -f "$d/ck/step-2/checkpoint.json" && -d "$d/ck/step-4" && ! -e "$d/ck/step-4/checkpoint.json" ]] \
  || fail "expected step-2 complete and step-4 without its manifest"
run "$strata" "${BASE[@]}" "${ASYNC[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --set train.checkpoint_every=2 --set train.resume="$d/ck" \
  --metrics "$d/resumed.jsonl"
expect_rc $? 0
expect_text "resumed from $d/ck/step-2"
[[ "$(losses "$d/m.jsonl" | head -2; losses "$d/resumed.jsonl")" == "$reference_losses" ]] \
  || fail "losses after the resume differ from the uninterrupted run"
[[ -f "$d/ck/step-8/checkpoint.json" && -f "$d/ck/step-4/checkpoint.json" ]] \
  || fail "the resumed background run did not complete step-4 and step-8"
expect_clean "$d"

# 6e. SIGTERM while a background checkpoint (step-4) is being written: it is completed,
#     then step-5 written; exit 143; the resume from step-5 gives the uninterrupted losses.
begin sigterm_background
d="$T/sigterm_background"
run STRATA_FAULT_SIGNAL=SIGTERM@5 "$strata" "${BASE[@]}" "${ASYNC[@]}" \
  --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.checkpoint_every=4 --metrics "$d/m.jsonl"
expect_rc $? 143
expect_text "last checkpoint: $d/ck/step-5 (written on SIGTERM)"
[[ -f "$d/ck/step-4/checkpoint.json" ]] || fail "the background step-4 was not completed"
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" --set train.checkpoint_dir="$d/ck" \
  --set train.resume="$d/ck" --metrics "$d/m.jsonl"
expect_rc $? 0
[[ "$(losses "$d/m.jsonl")" == "$reference_losses" ]] || fail "resumed losses differ from the uninterrupted run"
expect_clean "$d"

# 7. A full disk while a checkpoint is written: a clear error, no partial checkpoint, the
#    earlier checkpoint intact, no swap files.
begin full_disk_checkpoint
d="$T/full_disk_checkpoint"
run STRATA_FAULT_CHECKPOINT=enospc@4:2 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.checkpoint_dir="$d/ck" --set train.checkpoint_every=2
expect_rc $? 1
expect_text "No space left on device"
[[ -f "$d/ck/step-2/checkpoint.json" ]] || fail "the earlier checkpoint is gone"
expect_clean "$d"

# 8. A corrupted (torn) extent is caught by its checksum, never trained on; the trace of
#    the steps before the failure is still written.
begin torn_extent
d="$T/torn_extent"
run STRATA_FAULT_NVME=torn@3 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  --set train.trace_steps=1:100 --trace "$d/trace.json"
expect_rc $? 1
expect_text "checksum mismatch"
grep -q '"name":"step 1"' "$d/trace.json" 2>/dev/null || fail "no trace of the steps before the failure"
expect_clean "$d"

# 9. An I/O error (EIO) on a write and on a read.
begin eio
d="$T/eio"
run STRATA_FAULT_NVME=eio_write@5 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 1
expect_text "Input/output error"
expect_clean "$d"
run STRATA_FAULT_NVME=eio_read@5 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 1
expect_text "Input/output error"
expect_clean "$d"

# 10. Short reads and writes the engine cannot complete.
begin short_io
d="$T/short_io"
run STRATA_FAULT_NVME=short_read@4 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 1
expect_text "short read"
expect_clean "$d"
run STRATA_FAULT_NVME=short_write@4 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 1
expect_text "short write"
expect_clean "$d"

# 11. Two runs on one directory: the second is refused naming the first, which goes on;
#     its files are gone once it stops.
begin two_runs
d="$T/two_runs"
STRATA_FAULT_SIGNAL=SIGSTOP@2 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" \
  > "$d/first.txt" 2>&1 < /dev/null &
first=$!
for _ in $(seq 600); do  # until the first run has stopped itself, holding the directory
  [[ "$(ps -o stat= -p "$first" 2>/dev/null)" == T* ]] && break
  sleep 0.1
done
run "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap"
expect_rc $? 1
expect_text "in use by another live run"
expect_text "pid $first"
kill -TERM "$first"; kill -CONT "$first"
wait "$first"
expect_rc $? 143
expect_clean "$d"

# 12-13. Under mpirun: a rank killed (SIGKILL) and a rank stopped (SIGSTOP). The other rank
#     fails within zero.comm_timeout_s and removes its own files; the killed rank's
#     leftovers are removed by the next run in the directory.
if command -v mpirun > /dev/null; then
  MPI=(mpirun --oversubscribe --allow-run-as-root -np 2 --mca btl self,tcp)
  for kind in SIGKILL SIGSTOP; do
    begin "mpi_rank_$kind"
    d="$T/mpi_rank_$kind"
    run STRATA_FAULT_SIGNAL="$kind@2" "${MPI[@]}" "$strata" "${BASE[@]}" \
      --set zero.nvme_dir="$d/swap" --set zero.comm_timeout_s=5
    rc=$?
    [[ "$rc" != 0 && "$rc" != 124 ]] || fail "exit $rc: the job did not fail cleanly"
    [[ -z "$(find "$d/swap" -name 'strata-*-rank1*')" ]] || fail "rank 1 left files: $(ls "$d/swap")"
    run "$strata" "${BASE[@]}" --set train.steps=1 --set zero.nvme_dir="$d/swap"
    expect_rc $? 0
    expect_clean "$d"
  done
  # 14. Ranks started with different settings stop before any training collective,
  #     naming the keys and the ranks.
  begin mpi_disagree
  d="$T/mpi_disagree"
  run mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp \
    -np 1 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" : \
    -np 1 "$strata" "${BASE[@]}" --set zero.nvme_dir="$d/swap" --set train.steps=9 \
      --set train.seed=7
  rc=$?
  [[ "$rc" != 0 && "$rc" != 124 ]] || fail "exit $rc: ranks that disagree trained on"
  expect_text "different configurations"
  expect_text "train.steps: rank 0 8; rank 1 9"
  expect_text "train.seed: rank 0 1337; rank 1 7"
  expect_clean "$d"
  # 15. SIGTERM under mpirun: the ranks agree to stop after the same step; every rank exits
  #     143 and says so (the lead where it stopped, the others that they stopped with it);
  #     mpirun's own status is Open MPI's (non-zero).
  begin mpi_sigterm
  d="$T/mpi_sigterm"
  run STRATA_FAULT_SIGNAL="SIGTERM@2" "${MPI[@]}" "$strata" "${BASE[@]}" \
    --set zero.nvme_dir="$d/swap" --set zero.comm_timeout_s=30
  rc=$?
  [[ "$rc" != 0 && "$rc" != 124 ]] || fail "exit $rc: a SIGTERM'd job did not fail cleanly"
  expect_text "interrupted by SIGTERM after step 2 of $STEPS"
  expect_text "stopped by SIGTERM with the other ranks (exit 143)"
  expect_clean "$d"
else
  echo "SKIPPED: mpirun cases (no mpirun)"
fi

echo "fault suite: $cases cases, $failures failures"
[[ "$failures" == 0 ]]
