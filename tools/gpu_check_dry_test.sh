#!/usr/bin/env bash
# tools/gpu_check.sh without a GPU: the dry run skips every step with its reason within
# seconds and passes, with one summary line per step; --list prints the steps in order and
# the first five steps' limits add up to at most 300 s; --only runs the chosen steps (and
# step 1) and marks the others "not selected"; an unknown step exits 2 naming it and the
# valid ones; docs/gpu.md's table of the steps agrees with --list; without a kit the check
# fails naming it; with a kit but no GPU every step skips saying why. The step list here is
# the script's, in order: each step must be there. (The script and the doc are read from
# the checkout, through the script's symlink.)
# The checks that parse the script's output are functions, also run on made-up output
# that they must reject, so none of them can pass for want of something to read.
set -uo pipefail
script="$(readlink -f tools/gpu_check.sh)"
fail() { echo "FAIL: $*"; exit 1; }
readonly STEPS=(kit device kernels train nccl trajectory sample trace bench-124m bench-1.5b
                bench-flash bench-import memcheck)
readonly MAX_FIRST_FIVE_S=300
export OUT="$TEST_TMPDIR/out"

# verdict FILE NUMBER NAME: "VERDICT: reason" (or "VERDICT" alone) of that step's line in
# the summary of FILE; empty where the summary has no such line.
verdict() {
  awk -v number="$2" -v name="$3" '
    /^=== summary/ {in_summary = 1; next}
    in_summary && $3 == number && $4 == name {
      reason = ""
      if (match($0, /: [^:]*$/)) reason = substr($0, RSTART)
      print $1 reason
    }' "$1"
}

# summary_lines FILE: how many step lines the summary of FILE has.
summary_lines() {
  awk '/^=== summary/ {s = 1; next} s && /^(PASS|FAIL|TIMEOUT|SKIP) +[0-9]+s +[0-9]+ /' "$1" | wc -l
}

# check_list FILE: the steps --list printed in FILE are STEPS, numbered 1..N in order, and
# the first five limits add up to at most MAX_FIRST_FIVE_S, which the "by" column of step 5
# must say too. Prints what is wrong; returns 1 then.
check_list() {
  local number name limit by expected=1 sum_s=0 problems=""
  while read -r number name limit by _; do
    [ "$name" = "${STEPS[expected - 1]:-}" ] && [ "$number" = "$expected" ] ||
      problems+="line $expected is '$number $name', not '$expected ${STEPS[expected - 1]:-(none)}'; "
    if [ "$expected" -le 5 ]; then
      sum_s=$((sum_s + ${limit%s}))
      [ "$expected" -eq 5 ] && [ "${by%s}" != "$sum_s" ] &&
        problems+="step 5 is planned by ${by}, its limits add up to ${sum_s}s; "
    fi
    expected=$((expected + 1))
  done < <(grep -E '^ *[0-9]+  ' "$1")
  [ "$((expected - 1))" -eq "${#STEPS[@]}" ] ||
    problems+="$((expected - 1)) steps listed, ${#STEPS[@]} expected; "
  [ "$sum_s" -gt 0 ] && [ "$sum_s" -le "$MAX_FIRST_FIVE_S" ] ||
    problems+="the first five steps are planned for ${sum_s}s (at most ${MAX_FIRST_FIVE_S}s); "
  [ -z "$problems" ] || { echo "$problems"; return 1; }
}

# check_only FILE SELECTED...: in FILE (a dry run with --only), the steps numbered SELECTED
# and step 1 say "dry run", every other step "not selected", one line each.
check_only() {
  local file="$1" index number got want problems=""
  shift
  for index in "${!STEPS[@]}"; do
    number=$((index + 1))
    want="SKIP: not selected"
    [[ " 1 $* " == *" $number "* ]] && want="SKIP: dry run"
    got="$(verdict "$file" "$number" "${STEPS[$index]}")"
    [ "$got" = "$want" ] || problems+="step $number ${STEPS[$index]}: '$got', not '$want'; "
  done
  [ "$(summary_lines "$file")" -eq "${#STEPS[@]}" ] ||
    problems+="$(summary_lines "$file") summary lines for ${#STEPS[@]} steps; "
  [ -z "$problems" ] || { echo "$problems"; return 1; }
}

# The checkers reject made-up output: a list out of order, one over the time, a dry run
# with a step selected that should not be, step 1 left out, a line missing.
printf ' 1  kit  20s  20s  x\n 3  kernels  60s  80s  x\n 2  device  45s  125s  x\n' > "$TEST_TMPDIR/bad_order.txt"
check_list "$TEST_TMPDIR/bad_order.txt" >/dev/null && fail "check_list accepts steps out of order"
for index in "${!STEPS[@]}"; do
  printf '%2d  %-12s %5ss %5ss  x\n' "$((index + 1))" "${STEPS[$index]}" 100 "$((100 * (index + 1)))"
done > "$TEST_TMPDIR/too_long.txt"
check_list "$TEST_TMPDIR/too_long.txt" >/dev/null && fail "check_list accepts 500s for the first five steps"
for index in "${!STEPS[@]}"; do   # limits of 50 s, summed as if 100 s
  printf '%2d  %-12s %5ss %5ss  x\n' "$((index + 1))" "${STEPS[$index]}" 50 "$((100 * (index + 1)))"
done > "$TEST_TMPDIR/bad_by.txt"
check_list "$TEST_TMPDIR/bad_by.txt" >/dev/null && fail "check_list accepts a wrong sum for step 5"
{
  echo "=== summary (0s of 360s) ==="
  for index in "${!STEPS[@]}"; do
    reason="not selected"
    [ "$index" -eq 0 ] || [ "$index" -eq 2 ] && reason="dry run"
    printf 'SKIP        0s  %2d %-13s title: %s\n' "$((index + 1))" "${STEPS[$index]}" "$reason"
  done
} > "$TEST_TMPDIR/good_only.txt"
check_only "$TEST_TMPDIR/good_only.txt" 3 >/dev/null ||
  fail "check_only rejects a right summary: $(check_only "$TEST_TMPDIR/good_only.txt" 3)"
check_only "$TEST_TMPDIR/good_only.txt" 3 4 >/dev/null && fail "check_only accepts step 4 not run"
sed '2s/dry run/not selected/' "$TEST_TMPDIR/good_only.txt" > "$TEST_TMPDIR/no_kit_step.txt"
check_only "$TEST_TMPDIR/no_kit_step.txt" 3 >/dev/null && fail "check_only accepts step 1 not run"
sed '$d' "$TEST_TMPDIR/good_only.txt" > "$TEST_TMPDIR/short.txt"
check_only "$TEST_TMPDIR/short.txt" 3 >/dev/null && fail "check_only accepts a missing line"

# The whole dry run.
began=$(date +%s)
"$script" --dry-run --kit "$TEST_TMPDIR/none" > "$TEST_TMPDIR/dry.txt" 2>&1 ||
  fail "the dry run exited $?: $(tail -5 "$TEST_TMPDIR/dry.txt")"
elapsed=$(($(date +%s) - began))
[ "$elapsed" -le 60 ] || fail "the dry run took ${elapsed}s"
grep -q "GPU CHECK SKIPPED: dry run" "$TEST_TMPDIR/dry.txt" || fail "no dry-run verdict"
for index in "${!STEPS[@]}"; do
  got="$(verdict "$TEST_TMPDIR/dry.txt" "$((index + 1))" "${STEPS[$index]}")"
  [ "$got" = "SKIP: dry run" ] || fail "step $((index + 1)) ${STEPS[$index]} in the summary: '$got'"
done
[ "$(summary_lines "$TEST_TMPDIR/dry.txt")" -eq "${#STEPS[@]}" ] ||
  fail "$(summary_lines "$TEST_TMPDIR/dry.txt") summary lines for ${#STEPS[@]} steps"
grep -q "^plan: " "$TEST_TMPDIR/dry.txt" || fail "no plan printed at the start"
[ -s "$OUT/gpu_check.txt" ] || fail "nothing written to \$OUT/gpu_check.txt"

# --list: every step in order, the first five within the time.
"$script" --list > "$TEST_TMPDIR/list.txt" 2>&1 || fail "--list exited $?"
problems="$(check_list "$TEST_TMPDIR/list.txt")" || fail "--list: $problems"

# docs/gpu.md's table of the steps says what --list says (number, name, limit, by).
doc="$(dirname "$script")/../docs/gpu.md"
listed="$(grep -E '^ *[0-9]+  ' "$TEST_TMPDIR/list.txt" | awk '{print $1, $2, $3, $4}')"
documented="$(sed -nE 's/^ *\| ([0-9]+) \| `([^`]+)` \| ([0-9]+) s \| ([0-9]+) s \|.*/\1 \2 \3s \4s/p' "$doc")"
[ "$listed" = "$documented" ] ||
  fail "docs/gpu.md's table of steps differs from --list: $(diff <(echo "$listed") <(echo "$documented") | tr '\n' ' ')"

# --only, by name, by number and name, comma-separated.
"$script" --dry-run --only kernels > "$TEST_TMPDIR/only.txt" 2>&1 ||
  fail "--dry-run --only kernels exited $?: $(tail -5 "$TEST_TMPDIR/only.txt")"
problems="$(check_only "$TEST_TMPDIR/only.txt" 3)" || fail "--only kernels: $problems"
"$script" --dry-run --only 2 kernels > "$TEST_TMPDIR/only2.txt" 2>&1 || fail "--only 2 kernels exited $?"
problems="$(check_only "$TEST_TMPDIR/only2.txt" 2 3)" || fail "--only 2 kernels: $problems"
"$script" --dry-run --only device,kernels --kit "$TEST_TMPDIR/none" > "$TEST_TMPDIR/only3.txt" 2>&1 ||
  fail "--only device,kernels exited $?"
problems="$(check_only "$TEST_TMPDIR/only3.txt" 2 3)" || fail "--only device,kernels: $problems"

# An unknown step: exit 2, naming it and every valid step, before anything runs.
"$script" --dry-run --only kernels nosuch-step > "$TEST_TMPDIR/unknown.txt" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "an unknown step exited $status, not 2"
grep -q "unknown step 'nosuch-step'" "$TEST_TMPDIR/unknown.txt" ||
  fail "an unknown step is not named: $(head -3 "$TEST_TMPDIR/unknown.txt")"
for index in "${!STEPS[@]}"; do
  grep -qF "$((index + 1)) ${STEPS[$index]}" "$TEST_TMPDIR/unknown.txt" ||
    fail "the message for an unknown step does not name step '$((index + 1)) ${STEPS[$index]}'"
done
grep -q "GPU CHECK" "$TEST_TMPDIR/unknown.txt" && fail "the check ran despite an unknown step"
"$script" --dry-run --only 99 > "$TEST_TMPDIR/unknown99.txt" 2>&1
status=$?
[ "$status" -eq 2 ] && grep -q "unknown step '99'" "$TEST_TMPDIR/unknown99.txt" ||
  fail "step 99 exited $status: $(head -3 "$TEST_TMPDIR/unknown99.txt")"

# No kit: step 1 fails naming where it looked.
if "$script" --kit "$TEST_TMPDIR/none" > "$TEST_TMPDIR/nokit.txt" 2>&1; then
  fail "the check passed without a kit"
fi
got="$(verdict "$TEST_TMPDIR/nokit.txt" 1 kit)"
[[ "$got" == "FAIL: no GPU kit at $TEST_TMPDIR/none "* ]] ||
  fail "a missing kit is not named in step 1's line: '$got'"

if ! command -v nvidia-smi >/dev/null; then
  mkdir -p "$TEST_TMPDIR/kit/bin" "$TEST_TMPDIR/kit/lib"
  echo "stand-in kit" > "$TEST_TMPDIR/kit/MANIFEST.txt"
  "$script" --kit "$TEST_TMPDIR/kit" > "$TEST_TMPDIR/nogpu.txt" 2>&1 ||
    fail "a kit without a GPU should skip, not fail: $(tail -5 "$TEST_TMPDIR/nogpu.txt")"
  grep -q "GPU CHECK SKIPPED: no nvidia-smi" "$TEST_TMPDIR/nogpu.txt" || fail "no reason for skipping"
fi
echo "gpu_check.sh: dry run in ${elapsed}s, ${#STEPS[@]} steps skipped with their reason; --list, --only and an unknown step checked"
