#!/usr/bin/env bash
# The CUDA backend's tests on the CPU doubles (docs/simgpu.md): builds with --config=simgpu
# in its own output base (~/.cache/strata-simgpu; the disk cache shares every object that
# does not depend on CUDA with the normal build) and runs every test tagged "gpu" plus
# simgpu's own. Here a skip is a failure: the doubles are there so that nothing skips. The
# only skips allowed are the tests of machines WITHOUT a GPU (they say "a GPU is present" or
# "a GPU is usable here"; the normal build runs them).
# Prints one "simgpu: N passed, N failed" line and exits non-zero on any failure or skip.
# Usage: tools/simgpu_test.sh [extra bazel test arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
base="${STRATA_SIMGPU_OUTPUT_BASE:-$HOME/.cache/strata-simgpu}"
bazel_simgpu() { bazel --output_base="$base" "$@"; }

# The checkout's own packages (//... would also walk the normal output base's bazel-<dir>
# link, which this output base does not know as its own).
packages="$(git ls-files '*BUILD' | grep -v '^third_party/' | cut -d/ -f1 | grep -v BUILD |
  sort -u | sed 's|.*|//&/...|' | paste -sd+ -)"
targets="$(bazel_simgpu query --repo_env=STRATA_SIMGPU=1 \
  "attr(tags, '\bgpu\b', tests($packages)) + tests(//simgpu/...)" 2>/dev/null)"
if [ -z "$targets" ]; then
  echo "simgpu: no targets found (bazel query failed?)"
  exit 1
fi
echo "simgpu: $(echo "$targets" | wc -l) test targets"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# shellcheck disable=SC2086
bazel_simgpu test --config=simgpu --keep_going --nocache_test_results $targets "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FAILED TO BUILD|NO STATUS)' "$log")

# Skips: every test log of these targets, each skipped case with its reason.
testlogs="$(bazel_simgpu info --config=simgpu bazel-testlogs 2>/dev/null)"
skips=0
for target in $targets; do
  path="${target#//}"
  file="$testlogs/${path/://}/test.log"
  [ -f "$file" ] || continue
  while IFS= read -r line; do
    case "$line" in
      *"a GPU is present"*|*"a GPU is usable here"*) continue ;;
    esac
    echo "simgpu: SKIPPED in $target: $line"
    skips=$((skips + 1))
  done < <({ grep -B1 -E '^\[  SKIPPED \] [A-Za-z]' "$file" | grep -vE '^\[  SKIPPED \]|^--$'
              grep -E '^SKIPPED' "$file"; } | sed 's/^ *//')
done
if [ "$skips" -gt 0 ]; then
  echo "simgpu: $skips skipped test cases: under simgpu a skip is a failure"
  failed=$((failed + 1))
  status=1
fi
echo "simgpu: ${passed} passed, ${failed} failed"
exit "$status"
