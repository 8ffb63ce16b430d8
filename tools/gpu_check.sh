#!/usr/bin/env bash
# The one GPU check of strata, for a lent GPU machine (a bare machine with the CUDA toolkit
# and NCCL, perhaps without the Debian packages): installs what is missing, shows the GPU,
# runs every test tagged "gpu" built with CUDA (the CUDA kernels against their CPU
# references, the CUDA device, the NCCL communicator, and training on CUDA against the CPU
# backend: //kernels/cuda, //core/cuda, //collectives:nccl_communicator_test,
# //tests:gpu_training_test), then the GPU benchmark (`strata bench gpu`: tokens/s and MFU
# of gpt2-124m and gpt2-1.5b on the device, offloaded, NVMe params where available), then
# builds everything else with CUDA in the time left. Everything it prints also goes to
# $OUT/gpu_check.txt, or to ./gpu_check_results.txt where OUT is unset, headed by the date
# and the git commit; the benchmark's goal lines are repeated in the summary.
#
# The whole check keeps within 8 minutes (GPU_CHECK_BUDGET_S): each step runs under
# `timeout` with what is left, in order of value: tests first (but never eating the
# benchmark's reserve, GPU_CHECK_BENCH_RESERVE_S), then the benchmark (whose lines are
# flushed as they come, so a cut-short run keeps its figures), then the full build.
# GPU_CHECK_BENCH_STEPS sets the benchmark's measured steps (default 5).
# Exit status: 0 when CUDA was detected, every gpu test passed, none skipped for want of a
# GPU, each of the required gpu tests ran, and the benchmark completed; 1 otherwise.
# Usage: tools/gpu_check.sh [extra bazel test flags]
set -uo pipefail

readonly BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"
readonly BENCH_RESERVE_S="${GPU_CHECK_BENCH_RESERVE_S:-150}"
readonly BENCH_STEPS="${GPU_CHECK_BENCH_STEPS:-5}"
# The gpu tests that must have run (a missing one means a BUILD or tag regression).
readonly REQUIRED_TESTS=(
  //kernels/cuda:cuda_ops_test
  //core/cuda:cuda_device_test
  //core/cuda:fill_kernel_test
  //collectives:nccl_communicator_test
  //tests:gpu_training_test
)
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

# The GPU benchmark, on the binary the build step made. Its own --steps; the nvme
# placement (gpt2-124m, where zero.param_tier=nvme exists) writes its swap files under a
# scratch directory in the checkout (a disk; /tmp may be tmpfs, which refuses O_DIRECT).
gpu_bench() {
  local nvme_dir
  nvme_dir="$(mktemp -d "$PWD/.gpu-bench-nvme.XXXXXX")"
  bazel-bin/launch/strata bench gpu --steps "$BENCH_STEPS" --nvme-dir "$nvme_dir"
  local status=$?
  rm -rf "$nvme_dir"
  return "$status"
}

export BENCH_STEPS
export -f install_deps show_gpu show_toolkit cuda_detected gpu_bench

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
  # exists) and run them with their whole output, leaving the benchmark its reserve. Never
  # from a cache: a result cached where no GPU was (a skip that passed) proves nothing.
  local test_log test_limit
  test_log="$(mktemp)"
  test_limit=$(($(remaining) - BENCH_RESERVE_S))
  [ "$test_limit" -gt 300 ] && test_limit=300
  [ "$test_limit" -lt 60 ] && test_limit=60
  step "bazel test: every test tagged gpu" "$test_limit" \
    bazel test --keep_going --build_tests_only --test_tag_filters=gpu --test_output=all \
    --nocache_test_results \
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
  local required
  for required in "${REQUIRED_TESTS[@]}"; do
    if ! grep -qE "^${required}[[:space:]].*PASSED" "$test_log"; then
      echo "FAIL: $required did not pass (or did not run)"
      failures+=("$required did not pass")
    fi
  done
  rm -f "$test_log"

  # Then the GPU benchmark: the strata binary with CUDA (most objects are the tests'), and
  # `strata bench gpu`, whose lines are flushed as they come.
  local bench_log
  bench_log="$(mktemp)"
  if step "bazel build //launch:strata with CUDA" 120 bazel build "$@" //launch:strata; then
    step "GPU benchmark: strata bench gpu --steps $BENCH_STEPS" 240 gpu_bench 2>&1 |
      tee "$bench_log"
    local bench_status="${PIPESTATUS[0]}"
    [ "$bench_status" -ne 0 ] && failures+=("strata bench gpu exited $bench_status")
  else
    failures+=("building //launch:strata failed")
  fi

  # Last, every other target compiled with CUDA, in the time left: the same options as the
  # test step (so the analysis cache and the gpu tests' results stay) without
  # --build_tests_only. A failure fails the check; running out of time only warns (CI
  # compiles everything with CUDA too, without a GPU).
  step "bazel build //... with CUDA" 300 \
    bazel test --keep_going --test_tag_filters=gpu --test_output=errors --test_timeout=240 \
    "$@" //...
  local build_status=$?
  if [ "$build_status" -eq 124 ]; then
    echo "WARNING: the full build ran out of the budget (not counted as a failure)"
  elif [ "$build_status" -ne 0 ]; then
    failures+=("bazel build //... failed")
  fi

  echo
  echo "=== summary ($(($(date +%s) - START_S))s of ${BUDGET_S}s) ==="
  echo "GPU benchmark:"
  if grep -qE "^(GPU:|goals)" "$bench_log"; then
    grep -E "^(GPU:|gpt2|  )" "$bench_log"
  else
    echo "  (no figures)"
  fi
  rm -f "$bench_log"
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
