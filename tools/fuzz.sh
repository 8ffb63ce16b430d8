#!/usr/bin/env bash
# Fuzzes strata's parsers of outside input (fuzz/, docs/fuzzing.md): builds the libFuzzer
# targets with --config=fuzz (clang-14, ASan, UBSan) in an output base of their own, then runs
# each for a bounded, seeded pass on a copy of its committed corpus, and prints per target the
# executions, libFuzzer's final coverage (cov: edges, ft: features), the corpus before and after,
# and any crash. A crash (also a leak, a timeout or an out-of-memory) is copied into
# fuzz/TARGET/crashes/ as a reproducer, which //fuzz:TARGET_replay_test then replays; the script
# fails when any target crashed.
#
#   tools/fuzz.sh [--runs N] [--seed S] [--time SECONDS] [--merge] [--list] [TARGET...]
#
#   --runs N       executions per target (libFuzzer's -runs; default 2000)
#   --seed S       libFuzzer's -seed (default 1): the same build, corpus, N and S run the same
#                  inputs in the same order (address-space randomization is turned off for it)
#   --time SECONDS a time bound instead of a run count (-max_total_time; not deterministic)
#   --merge        add the inputs that reached new coverage to fuzz/TARGET/corpus/ (minimized
#                  with -merge=1); without it the committed corpus is never changed
#   --list         print the targets and exit
#   TARGET         e.g. hardware, safetensors_header (default: every target of fuzz/BUILD)
#
# Environment: STRATA_FUZZ_OUTPUT_BASE (default ~/.cache/strata-fuzz), where the fuzz build's
# objects live (never the default build's: the compiler differs). Each target's full libFuzzer
# log is kept in $STRATA_FUZZ_LOG_DIR (default a temporary directory, printed).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=2000
seed=1
time_bound=""
merge=0
targets=()
all_targets() { sed -n 's/^ *name = "\([a-z0-9_]*\)",$/\1/p' fuzz/BUILD | grep -vE '^(libfuzzer|fuzz_scratch|replay_main)$'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --time) time_bound="$2"; shift 2 ;;
    --merge) merge=1; shift ;;
    --list) all_targets; exit 0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown flag $1 (see tools/fuzz.sh --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
known="$(all_targets)"
[ ${#targets[@]} -gt 0 ] || mapfile -t targets <<< "$known"
for target in "${targets[@]}"; do
  grep -qx "$target" <<< "$known" || {
    echo "fuzz: no target '$target'; the targets: $(echo $known)" >&2
    exit 2
  }
done

output_base="${STRATA_FUZZ_OUTPUT_BASE:-$HOME/.cache/strata-fuzz}"
bazel_fuzz() { bazel --output_base="$output_base" "$@"; }
labels=()
for target in "${targets[@]}"; do labels+=("//fuzz:${target}_fuzz"); done
build_start=$(date +%s)
build_log="$(mktemp)"
build_status=0
bazel_fuzz build --config=fuzz "${labels[@]}" > "$build_log" 2>&1 || build_status=$?
# ld.gold warns once per ASan helper symbol it cannot export: noise, dropped.
grep -v "Cannot export local symbol" "$build_log" || true
rm -f "$build_log"
[ "$build_status" -eq 0 ] || { echo "fuzz: the fuzz build failed" >&2; exit 1; }
bin="$(bazel_fuzz info --config=fuzz bazel-bin 2>/dev/null)"
echo "fuzz: built ${#labels[@]} targets in $(( $(date +%s) - build_start )) s"

log_dir="${STRATA_FUZZ_LOG_DIR:-$(mktemp -d /tmp/strata-fuzz-logs.XXXXXX)}"
mkdir -p "$log_dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bound=(-runs="$runs")
[ -z "$time_bound" ] || bound=(-max_total_time="$time_bound")
# Address-space layout randomization off: libFuzzer's comparison tracing feeds the values a
# target compares, pointers among them, into its mutations, so with ASLR on the same seed
# takes another path from run to run.
no_aslr=()
if setarch "$(uname -m)" -R true 2>/dev/null; then
  no_aslr=(setarch "$(uname -m)" -R)
else
  echo "fuzz: setarch -R is not allowed here: the pass is not deterministic (ASLR on)"
fi

crashed=0
printf '%-20s %10s %7s %7s %15s %6s  %s\n' target executions cov ft corpus seconds result
for target in "${targets[@]}"; do
  corpus="$work/$target/corpus"
  artifacts="$work/$target/artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp fuzz/"$target"/corpus/* "$corpus"/
  seeds=$(ls "$corpus" | wc -l)
  log="$log_dir/$target.log"
  start=$(date +%s)
  status=0
  # stdin from /dev/null: an option naming /dev/stdin reads nothing instead of waiting.
  # TMPDIR inside the work directory: a crashed target's scratch files go with it.
  mkdir -p "$work/tmp"
  TMPDIR="$work/tmp" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
    "${no_aslr[@]}" "$bin/fuzz/${target}_fuzz" "${bound[@]}" -seed="$seed" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" < /dev/null > "$log" 2>&1 ||
    status=$?
  seconds=$(( $(date +%s) - start ))
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # The last status line: "#2000 DONE cov: 523 ft: 1102 corp: 30/4Kb ..." (or a crash's).
  last=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  after=$(ls "$corpus" | wc -l)
  result="ok"
  if [ "$status" -ne 0 ]; then
    crashed=$((crashed + 1))
    mkdir -p fuzz/"$target"/crashes
    found=()
    for artifact in "$artifacts"/*; do
      [ -f "$artifact" ] || continue
      cp "$artifact" fuzz/"$target"/crashes/
      found+=("fuzz/$target/crashes/$(basename "$artifact")")
    done
    result="CRASH (exit $status): ${found[*]:-no reproducer written}; log $log"
  fi
  printf '%-20s %10s %7s %7s %15s %6s  %s\n' "$target" "${executions:-?}" "${cov:-?}" \
    "${ft:-?}" "$seeds -> $after" "$seconds" "$result"
  if [ "$status" -ne 0 ]; then
    grep -E 'ERROR: |runtime error: |SUMMARY: |^ *#[0-9]+ 0x.* in ' "$log" | head -14 | sed 's/^/    /'
  fi
  if [ "$merge" -eq 1 ] && [ "$status" -eq 0 ]; then
    "$bin/fuzz/${target}_fuzz" -merge=1 fuzz/"$target"/corpus "$corpus" < /dev/null \
      > "$log_dir/$target.merge.log" 2>&1
    echo "    merged: fuzz/$target/corpus has $(ls fuzz/"$target"/corpus | wc -l) files"
  fi
done
echo "fuzz: ${#targets[@]} targets, ${bound[*]} -seed=$seed, $crashed crashed; logs in $log_dir"
[ "$crashed" -eq 0 ]
