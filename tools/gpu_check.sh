#!/usr/bin/env bash
# The one GPU check of strata, for a lent GPU machine (a bare machine with the CUDA toolkit
# and NCCL, perhaps without the Debian packages): installs what is missing, shows the GPU,
# runs every test tagged "gpu" built with CUDA, builds everything else with CUDA, and (later)
# runs the GPU benchmark. Everything it prints also goes to $OUT/gpu_check.txt, or to
# ./gpu_check_results.txt where OUT is unset, headed by the date and the git commit.
#
# The whole check keeps within 8 minutes (GPU_CHECK_BUDGET_S): each step runs under
# `timeout` with what is left, tests first so that a slow full build cannot starve them.
# Exit status: 0 when CUDA was detected, every gpu test passed and none skipped for want of
# a GPU; 1 otherwise. Usage: tools/gpu_check.sh [extra bazel test flags]
set -uo pipefail

readonly BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"
readonly START_S="$(date +%s)"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  RESULTS="$OUT/gpu_check.txt"
else
  RESULTS="$PWD/gpu_check_results.txt"
fi
readonly RESULTS
cd "$(dirname "$0")/.."

# Seconds left in the budget, less a reserve for the summary.
remaining() { echo $((BUDGET_S - ($(date +%s) - START_S) - 15)); }

# step NAME MAX_S COMMAND...: runs COMMAND under timeout (MAX_S or what is left, the
# smaller), prints its status and returns it. 124 = ran out of time.
step() {
  local name="$1" max_s="$2"
  shift 2
  local left
  left="$(remaining)"
  [ "$left" -lt "$max_s" ] && max_s="$left"
  echo
  echo "=== $name (limit ${max_s}s, $(($(date +%s) - START_S))s elapsed) ==="
  if [ "$max_s" -le 5 ]; then
    echo "SKIPPED: no time left in the ${BUDGET_S}s budget"
    return 124
  fi
  # Through bash so that a step may be one of the functions below (exported).
  timeout -k 10 "$max_s" bash -c '"$@"' "$name" "$@"
  local status=$?
  [ "$status" -eq 124 ] && echo "TIMED OUT after ${max_s}s"
  echo "=== $name: exit $status ==="
  return "$status"
}

install_deps() {
  if [ -x tools/install_deps.sh ]; then
    tools/install_deps.sh
  else
    # The project's package list (MACHINE.md), should tools/install_deps.sh be missing.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        bazel-bootstrap bazel-platforms bazel-skylib libopenmpi-dev openmpi-bin liburing-dev \
        libgtest-dev libbenchmark-dev libdnnl-dev nlohmann-json3-dev libcli11-dev \
        libxxhash-dev libabsl-dev libspdlog-dev fio
  fi
}

show_gpu() {
  nvidia-smi || return $?
  echo
  nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total,memory.used \
    --format=csv
}

show_toolkit() {
  echo "CUDA_PATH=${CUDA_PATH:-/usr/local/cuda (default)}"
  "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" --version
}

# What the build detected: HAS_CUDA must be True here, else nothing CUDA was built.
cuda_detected() {
  local defs
  defs="$(bazel info output_base 2>/dev/null)/external/local_cuda/defs.bzl"
  if [ ! -f "$defs" ]; then
    echo "no $defs: the build did not get as far as detecting CUDA"
    return 1
  fi
  cat "$defs"
  grep -q '^HAS_CUDA = True' "$defs"
}

export -f install_deps show_gpu show_toolkit cuda_detected

main() {
  # @local_cuda looks in CUDA_PATH, else /usr/local/cuda; point it at the nvcc on PATH
  # when the toolkit sits elsewhere.
  if [ -z "${CUDA_PATH:-}" ] && [ ! -x /usr/local/cuda/bin/nvcc ] && command -v nvcc >/dev/null; then
    CUDA_PATH="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
    export CUDA_PATH
  fi

  echo "strata GPU check"
  echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
    echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' plus uncommitted changes')"
  else
    echo "commit: unknown (no git repository here)"
  fi
  echo "host:   $(hostname) ($(nproc) cores, $(uname -r))"
  echo "budget: ${BUDGET_S}s; results in $RESULTS"

  local failures=() tests_status

  step "install dependencies (tools/install_deps.sh)" 150 install_deps ||
    echo "WARNING: installing dependencies failed; going on with what is installed"
  step "nvidia-smi" 30 show_gpu || failures+=("nvidia-smi failed")
  step "CUDA toolkit" 30 show_toolkit || failures+=("no nvcc")

  # Tests first: build only the gpu-tagged tests (with CUDA, the default where nvcc
  # exists) and run them with their whole output.
  local test_log
  test_log="$(mktemp)"
  step "bazel test: every test tagged gpu" 360 \
    bazel test --keep_going --build_tests_only --test_tag_filters=gpu --test_output=all \
    --test_timeout=240 "$@" //... 2>&1 | tee "$test_log"
  tests_status="${PIPESTATUS[0]}"
  [ "$tests_status" -ne 0 ] && failures+=("bazel test of the gpu tests exited $tests_status")

  step "CUDA detected by @local_cuda" 30 cuda_detected || {
    echo "FAIL: the build did not use CUDA (see CUDA_REASON above)"
    failures+=("the build did not use CUDA")
  }
  # A GPU test that skips for want of a GPU on a GPU machine is a failure of the check.
  if grep -q "no usable GPU" "$test_log"; then
    echo "FAIL: gpu tests skipped for want of a usable GPU:"
    grep "no usable GPU" "$test_log" | sort | uniq -c
    failures+=("gpu tests skipped for want of a GPU")
  fi
  if ! grep -qE "^//.*(PASSED|FAILED|TIMEOUT|NO STATUS)" "$test_log"; then
    echo "FAIL: no gpu-tagged test ran"
    failures+=("no gpu test ran")
  fi
  rm -f "$test_log"

  # Then every other target, compiled with CUDA, in the time left: the same options as the
  # test step (so the analysis cache and the gpu tests' results stay) without
  # --build_tests_only. A failure here fails the check too.
  step "bazel build //... with CUDA" 300 \
    bazel test --keep_going --test_tag_filters=gpu --test_output=errors --test_timeout=240 \
    "$@" //... || failures+=("bazel build //... failed")

  # PLACEHOLDER: the GPU benchmark (strata bench on the CUDA backend) goes here once it
  # exists; give it its own limit and add its failure to `failures`.
  step "GPU benchmark" 60 echo "GPU benchmark: not implemented yet"

  echo
  echo "=== summary ($(($(date +%s) - START_S))s of ${BUDGET_S}s) ==="
  if [ ${#failures[@]} -eq 0 ]; then
    echo "GPU CHECK PASSED"
    return 0
  fi
  echo "GPU CHECK FAILED:"
  printf '  - %s\n' "${failures[@]}"
  return 1
}

main "$@" 2>&1 | tee "$RESULTS"
exit "${PIPESTATUS[0]}"
