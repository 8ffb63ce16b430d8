#!/usr/bin/env bash
# The CUDA backend's tests on the CPU doubles (docs/simgpu.md): builds with --config=simgpu
# in its own output base (~/.cache/strata-simgpu; the disk cache shares every object that
# does not depend on CUDA with the normal build) and runs every test tagged "gpu" plus
# simgpu's own in ordering mode (every stream ordering checked), then the kernels and the
# CLI again in blocking mode (a host access to device memory faults; the device contract's
# cases that block a stream on the host's later action cannot run there), then simgpu's own
# tests and the kernels under AddressSanitizer. Here a skip is a failure: the doubles are there so that
# nothing skips. The only skips allowed are the tests of machines WITHOUT a GPU (they say
# "a GPU is present" or "a GPU is usable here"; the normal build runs them).
# Prints "simgpu: N passed, N failed" (all passes) and exits non-zero on any failure or skip.
# Usage: tools/simgpu_test.sh [extra bazel test arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
base="${STRATA_SIMGPU_OUTPUT_BASE:-$HOME/.cache/strata-simgpu}"

# The checkout's own packages (//... would also walk the normal output base's bazel-<dir>
# link, which this output base does not know as its own).
packages="$(git ls-files '*BUILD' | grep -v '^third_party/' | cut -d/ -f1 | grep -v BUILD |
  sort -u | sed 's|.*|//&/...|' | paste -sd+ -)"
targets="$(bazel --output_base="$base" query --repo_env=STRATA_SIMGPU=1 \
  "attr(tags, '\bgpu\b', tests($packages)) + tests(//simgpu/...)" 2>/dev/null)"
if [ -z "$targets" ]; then
  echo "simgpu: no targets found (bazel query failed?)"
  exit 1
fi
passed=0
failed=0
status=0
# run_pass NAME OUTPUT_BASE TARGETS ARGS...: one `bazel test --config=simgpu` run, its
# results and skips counted.
run_pass() {
  local name="$1" pass_base="$2" pass_targets="$3"
  shift 3
  local log testlogs
  log="$(mktemp)"
  echo "simgpu: $name: $(echo "$pass_targets" | wc -w) test targets"
  # shellcheck disable=SC2086
  bazel --output_base="$pass_base" test --config=simgpu --keep_going --nocache_test_results \
    "$@" $pass_targets 2>&1 | tee "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  passed=$((passed + $(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")))
  failed=$((failed + $(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FAILED TO BUILD|NO STATUS)' "$log")))
  rm -f "$log"
  testlogs="$(bazel --output_base="$pass_base" info --config=simgpu "$@" bazel-testlogs 2>/dev/null)"
  # Skips: every test log of the pass, each skipped case with its reason.
  local target path dir file line skips=0
  for target in $pass_targets; do
    path="${target#//}"
    dir="$testlogs/${path/://}"
    # A sharded test's logs are per shard (its test.log may be an older unsharded run's).
    for file in "$dir"/shard_*_of_*/test.log "$dir/test.log"; do
      [ -f "$file" ] || continue
      [ "$file" = "$dir/test.log" ] && compgen -G "$dir/shard_*_of_*/test.log" > /dev/null && continue
      while IFS= read -r line; do
        case "$line" in
          *"a GPU is present"*|*"a GPU is usable here"*) continue ;;
        esac
        echo "simgpu: SKIPPED in $target ($name): $line"
        skips=$((skips + 1))
      done < <({ grep -B1 -E '^\[  SKIPPED \] [A-Za-z]' "$file" | grep -vE '^\[  SKIPPED \]|^--$'
                  grep -E '^SKIPPED' "$file"; } | sed 's/^ *//')
    done
  done
  if [ "$skips" -gt 0 ]; then
    echo "simgpu: $skips skipped test cases: under simgpu a skip is a failure"
    failed=$((failed + 1))
    status=1
  fi
}

run_pass ordering "$base" "$targets" "$@"
run_pass blocking "$base" \
  "//kernels/cuda:cuda_ops_test //device/cuda:fill_kernel_test //tests:cuda_cli_test" \
  --test_env=STRATA_SIMGPU_MODE=blocking "$@"
# Under AddressSanitizer (the ASan output base): simgpu's own tests (the fibers' switches
# annotated) and the kernels against their references, the .cu files instrumented too, so
# a static __shared__ array's overrun is found (a function static in an anonymous
# namespace: ASan guards it; dynamic shared memory ends at a guard page in every build).
run_pass asan "${STRATA_ASAN_OUTPUT_BASE:-$HOME/.cache/strata-asan}" \
  "//simgpu:executor_test //simgpu:cudart_test //simgpu:cublas_test //kernels/cuda:cuda_ops_test //device/cuda:fill_kernel_test" \
  --config=asan --symlink_prefix=bazel-asan- "$@"
echo "simgpu: ${passed} passed, ${failed} failed"
exit "$status"
