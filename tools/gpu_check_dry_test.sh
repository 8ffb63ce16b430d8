#!/usr/bin/env bash
# tools/gpu_check.sh without a GPU: the dry run skips every step with its reason within
# seconds and passes; without a kit the check fails naming it; with a kit but no GPU
# every step skips saying why. The step list is the script's: each step must be there.
set -uo pipefail
script="$(readlink -f tools/gpu_check.sh)"
fail() { echo "FAIL: $*"; exit 1; }
readonly STEPS=("kit loads" "CUDA device tests" "CUDA kernels against CPU references"
                "30 steps CPU vs CUDA" "trace on CUDA" "sample on CUDA" "NCCL loading"
                "NCCL communicator"
                "CPU-vs-CUDA trajectory tests" "bench gpu: gpt2-124m" "bench gpu: gpt2-1.5b"
                "bench gpu: gpt2-124m, flash attention" "bench import on CUDA"
                "compute-sanitizer memcheck")
export OUT="$TEST_TMPDIR/out"

began=$(date +%s)
"$script" --dry-run --kit "$TEST_TMPDIR/none" > "$TEST_TMPDIR/dry.txt" 2>&1 ||
  fail "the dry run exited $?: $(tail -5 "$TEST_TMPDIR/dry.txt")"
elapsed=$(($(date +%s) - began))
[ "$elapsed" -le 60 ] || fail "the dry run took ${elapsed}s"
grep -q "GPU CHECK SKIPPED: dry run" "$TEST_TMPDIR/dry.txt" || fail "no dry-run verdict"
for name in "${STEPS[@]}"; do
  grep -qE "^SKIP +0s  ${name}.*: dry run" "$TEST_TMPDIR/dry.txt" || fail "step '$name' not skipped in the summary"
done
[ -s "$OUT/gpu_check.txt" ] || fail "nothing written to \$OUT/gpu_check.txt"

if "$script" --kit "$TEST_TMPDIR/none" > "$TEST_TMPDIR/nokit.txt" 2>&1; then
  fail "the check passed without a kit"
fi
grep -q "FAIL .*the GPU kit: none at $TEST_TMPDIR/none" "$TEST_TMPDIR/nokit.txt" ||
  fail "a missing kit is not named: $(tail -5 "$TEST_TMPDIR/nokit.txt")"

if ! command -v nvidia-smi >/dev/null; then
  mkdir -p "$TEST_TMPDIR/kit/bin" "$TEST_TMPDIR/kit/lib"
  echo "stand-in kit" > "$TEST_TMPDIR/kit/MANIFEST.txt"
  "$script" --kit "$TEST_TMPDIR/kit" > "$TEST_TMPDIR/nogpu.txt" 2>&1 ||
    fail "a kit without a GPU should skip, not fail: $(tail -5 "$TEST_TMPDIR/nogpu.txt")"
  grep -q "GPU CHECK SKIPPED: no nvidia-smi" "$TEST_TMPDIR/nogpu.txt" || fail "no reason for skipping"
fi
echo "gpu_check.sh: dry run in ${elapsed}s, ${#STEPS[@]} steps skipped with their reason"
