#!/usr/bin/env bash
# The one GPU check of strata, for a lent GPU machine that is bare and offline: it runs from
# the GPU kit alone (tools/gpu_kit.sh builds it here; the device tool carries ".gpu"), with
# no apt, no Bazel and no compiler. It finds cuBLAS and NCCL where the machine keeps them
# (CUDA toolkit folders, the ldconfig cache, a Python environment's nvidia/*/lib), prints
# its plan (each step's limit and the sum of the limits up to it, against the budget) and
# the machine's facts, then runs each step under its own timeout, in order of value, so
# that the first five (what a GPU run must settle before anything else: does it load, do
# the device and the kernels keep their contracts, does training match the CPU, does NCCL
# work) fit the first 300 s even if each uses all of its limit. The steps and what each
# proves are the table STEP_* below (--list prints it). A lent machine costs its start-up
# and the kit's transfer before the first step, so a rerun of a failing step should not
# pay for the steps that passed: --only runs the chosen ones.
#
# Everything it prints goes to $OUT/gpu_check.txt (or ./gpu_check_results.txt where OUT is
# unset), headed by the date and the kit's manifest. It ends with one line per step
# (PASS / FAIL / TIMEOUT / SKIP, seconds, number, name) and the benchmark's goal lines. The
# whole run keeps within GPU_CHECK_BUDGET_S (default 360 s), so a rerun fits a 15-minute
# lease: a step gets its limit or what is left, whichever is less.
#
# --dry-run: every step says SKIP with its reason, within seconds, without a GPU (CI runs
# it: //tools:gpu_check_dry_test). Without a kit, or a kit built for another architecture,
# cuBLAS or NCCL not found, or too little GPU memory, the step that needs it fails with one
# line of reason; nothing crashes or hangs the check.
readonly USAGE='usage: tools/gpu_check.sh [--dry-run] [--kit DIR] [--only STEP...] [--list]
  --dry-run        every step SKIPs with its reason (no GPU needed)
  --kit DIR        the GPU kit (default: .gpu beside tools/)
  --only STEP...   runs only these steps, by number or name, space- or comma-separated
                   (e.g. --only 2 kernels, --only device,kernels); the others SKIP "not
                   selected". Step 1 (kit) always runs: every other step runs its binaries.
  --list           prints the steps (number, name, limit, sum of limits, what each proves)'
set -uo pipefail

readonly BUDGET_S="${GPU_CHECK_BUDGET_S:-360}"
readonly SUMMARY_RESERVE_S=10   # kept back from the steps for the summary
readonly START_S="$(date +%s)"

# --- the steps, in order of value -------------------------------------------------------
# One line each: name (for --only), limit in seconds (what the step needs on an H200 with
# room for a slow first CUDA context, not a share of the budget), title, command (run by
# bash -c with the functions below exported) and what a PASS proves. The limits of the
# first five add up to at most 300 s (//tools:gpu_check_dry_test checks it through
# --list); the later ones run in what the earlier ones leave of the budget.
STEP_NAMES=()
STEP_LIMITS_S=()
STEP_TITLES=()
STEP_COMMANDS=()
STEP_PROVES=()
add_step() {
  STEP_NAMES+=("$1") STEP_LIMITS_S+=("$2") STEP_TITLES+=("$3") STEP_COMMANDS+=("$4")
  STEP_PROVES+=("$5")
}
# Step 1 is run whatever --only says: every other step runs the kit's binaries, and a kit
# that does not load would only make them fail with the loader's message instead.
add_step kit 20 "kit loads" "kit_loads" \
  "every binary of the kit finds its libraries here and strata starts (always runs: the other steps run its binaries)"
add_step device 45 "CUDA device contract tests" "device_tests" \
  "the CUDA device keeps the device contract (stream order, events, sticky errors, pools, no driver calls in a steady state, traced spans) and a cuda_library kernel runs"
add_step kernels 60 "CUDA kernels against CPU references" "gpu_test cuda_ops_test" \
  "every CUDA op matches its CPU reference elementwise within its stated tolerance, fp32 and bf16"
add_step train 75 "30 steps CPU vs CUDA (fp32, bf16; GPT, llama-tiny)" "train_comparison" \
  "the built-in GPT and llama-tiny train 30 steps on CUDA, loss beside the CPU's step by step; bf16 within 1e-2 relative"
add_step nccl 45 "NCCL loading and communicator" "nccl_tests" \
  "NCCL loads (>= 2.14) and the communicator's collectives work (its two-rank cases need 2 GPUs)"
add_step trajectory 120 "CPU-vs-CUDA trajectory tests" "trajectory_tests" \
  "training on CUDA matches the CPU over 10 steps (stages 0-3, offload, NVMe, LLaMA; fp32 1e-4, bf16 2e-2), one process per test"
add_step sample 30 "sample on CUDA (KV cache, sliding context)" "cuda_sample" \
  "strata sample on CUDA (fp32, bf16) gives 40 greedy tokens past the 32-position context, as the CPU does"
add_step trace 30 "trace on CUDA (device-time spans)" "cuda_trace" \
  "a traced stage-3 run on CUDA has device-time compute spans whose waits sum to compute_stall_ms"
add_step bench-124m 120 "bench gpu: gpt2-124m" "bench --presets gpt2-124m --nvme-presets gpt2-124m" \
  "tokens/s and MFU of gpt2-124m (device, offload, delayed update, NVMe) against the goals"
add_step bench-1.5b 150 "bench gpu: gpt2-1.5b" \
  "bench --presets gpt2-1.5b --nvme-presets '' --set tiers.host_memory_limit=64GiB" \
  "the same for gpt2-1.5b, host memory limited to 64 GiB"
add_step bench-flash 60 "bench gpu: gpt2-124m, flash attention" "bench_flash" \
  "gpt2-124m with the CUDA-core flash attention, beside the GEMM attention's figures"
add_step bench-import 75 "bench import on CUDA" "import_bench" \
  "the Hugging Face import into a CUDA engine against the disk's read rate (optimizer on the device, then on the host)"
add_step memcheck 90 "compute-sanitizer memcheck (kernels)" "memcheck" \
  "compute-sanitizer finds no memory error in the kernel tests"
readonly STEP_COUNT=${#STEP_NAMES[@]}

usage_error() {
  echo "gpu_check: $*" >&2
  echo "$USAGE" >&2
  exit 2
}

step_names_line() {
  local index line=""
  for index in "${!STEP_NAMES[@]}"; do line+="${line:+, }$((index + 1)) ${STEP_NAMES[$index]}"; done
  echo "$line"
}

# The selected steps, "1 kit, 3 kernels".
selected_line() {
  local index line=""
  for index in "${!STEP_NAMES[@]}"; do
    [ "${SELECTED[$index]}" -eq 1 ] && line+="${line:+, }$((index + 1)) ${STEP_NAMES[$index]}"
  done
  echo "$line"
}

print_list() {
  local index by_s=0
  echo "steps of tools/gpu_check.sh, in order of value (limit: the step's timeout; by: the sum"
  echo "of the limits up to it, against the ${BUDGET_S}s budget less ${SUMMARY_RESERVE_S}s for the summary):"
  printf '%2s  %-13s %6s %6s  %s\n' "#" name limit by proves
  for index in "${!STEP_NAMES[@]}"; do
    by_s=$((by_s + STEP_LIMITS_S[index]))
    printf '%2d  %-13s %5ss %5ss  %s\n' "$((index + 1))" "${STEP_NAMES[$index]}" \
      "${STEP_LIMITS_S[$index]}" "$by_s" "${STEP_PROVES[$index]}"
  done
}

dry_run=0
list=0
kit_dir=""
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --list) list=1 ;;
    --kit)
      [ $# -ge 2 ] || usage_error "--kit needs a folder"
      kit_dir="$2"
      shift
      ;;
    --only)
      shift
      [ $# -gt 0 ] && [[ "$1" != --* ]] || usage_error "--only needs at least one step ($(step_names_line))"
      while [ $# -gt 0 ] && [[ "$1" != --* ]]; do
        only+=("$1")
        shift
      done
      continue
      ;;
    -h | --help) echo "$USAGE"; exit 0 ;;
    *) usage_error "unknown argument $1" ;;
  esac
  shift
done

# SELECTED[i] is 1 where step i+1 runs: every step without --only; with it, step 1 and the
# steps named (by number or name; unknown ones are an error listing the valid names).
SELECTED=()
for index in "${!STEP_NAMES[@]}"; do SELECTED[index]=$((${#only[@]} == 0 ? 1 : 0)); done
if [ ${#only[@]} -gt 0 ]; then
  SELECTED[0]=1
  unknown=()
  for word in "${only[@]}"; do
    IFS=',' read -r -a parts <<<"$word"
    for part in "${parts[@]}"; do
      [ -n "$part" ] || continue
      found=""
      if [[ "$part" =~ ^[0-9]+$ ]] && [ "$((10#$part))" -ge 1 ] && [ "$((10#$part))" -le "$STEP_COUNT" ]; then
        found=$((10#$part - 1))
      else
        for index in "${!STEP_NAMES[@]}"; do
          [ "${STEP_NAMES[$index]}" = "$part" ] && found="$index"
        done
      fi
      if [ -n "$found" ]; then SELECTED[found]=1; else unknown+=("'$part'"); fi
    done
  done
  if [ ${#unknown[@]} -gt 0 ]; then
    names="$(printf ", %s" "${unknown[@]}")"
    echo "gpu_check: unknown step ${names#, }: the steps are $(step_names_line) (by number or name)" >&2
    exit 2
  fi
fi

if [ "$list" -eq 1 ]; then
  print_list
  exit 0
fi

cd "$(dirname "$0")/.."
kit_dir="${kit_dir:-$PWD/.gpu}"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  RESULTS="$OUT/gpu_check.txt"
else
  RESULTS="$PWD/gpu_check_results.txt"
fi

SUMMARY=()      # one line per step
KIT=""          # the unpacked kit (bin/, lib/)
KIT_FAILURE=""  # why there is no kit: step 1 fails saying it, the others skip

remaining() { echo $((BUDGET_S - ($(date +%s) - START_S) - SUMMARY_RESERVE_S)); }

# The plan: the selected steps with their limits and the sum of the limits up to each,
# against the budget; a step past it runs only in what the steps before it leave.
print_plan() {
  local index by_s=0 note
  echo "plan: limits and their running sum against ${BUDGET_S}s (${SUMMARY_RESERVE_S}s of it kept for the summary):"
  for index in "${!STEP_NAMES[@]}"; do
    if [ "${SELECTED[$index]}" -eq 0 ]; then
      printf '  %2d %-13s %5ss %6s  not selected\n' "$((index + 1))" "${STEP_NAMES[$index]}" \
        "${STEP_LIMITS_S[$index]}" "-"
      continue
    fi
    by_s=$((by_s + STEP_LIMITS_S[index]))
    note=""
    [ "$by_s" -gt $((BUDGET_S - SUMMARY_RESERVE_S)) ] &&
      note="past the budget: runs in what the steps before it leave"
    [ "$index" -eq 0 ] && [ ${#only[@]} -gt 0 ] && note="always runs: the other steps run the kit's binaries"
    printf '  %2d %-13s %5ss %5ss%s\n' "$((index + 1))" "${STEP_NAMES[$index]}" \
      "${STEP_LIMITS_S[$index]}" "$by_s" "${note:+  $note}"
  done
}

# step INDEX: runs the step's command under timeout (its limit or what is left), records
# PASS/FAIL/TIMEOUT and its seconds. A step not selected, or any step in a dry run or where
# SKIP_REASON is set, only records SKIP with the reason.
step() {
  local index="$1"
  local max_s="${STEP_LIMITS_S[$index]}" command="${STEP_COMMANDS[$index]}"
  local label left began status verdict
  label="$(printf '%2d %-13s %s' "$((index + 1))" "${STEP_NAMES[$index]}" "${STEP_TITLES[$index]}")"
  if [ "${SELECTED[$index]}" -eq 0 ]; then
    SUMMARY+=("$(printf 'SKIP     %4ss  %s: not selected' 0 "$label")")
    return 0
  fi
  left="$(remaining)"
  [ "$left" -lt "$max_s" ] && max_s="$left"
  echo
  echo "=== $label (limit ${max_s}s, $(($(date +%s) - START_S))s elapsed) ==="
  if [ "$index" -eq 0 ] && [ -n "$KIT_FAILURE" ]; then
    echo "FAIL: $KIT_FAILURE"
    SUMMARY+=("$(printf 'FAIL     %4ss  %s: %s' 0 "$label" "$KIT_FAILURE")")
    return 1
  fi
  if [ -n "${SKIP_REASON:-}" ]; then
    echo "SKIP: $SKIP_REASON"
    SUMMARY+=("$(printf 'SKIP     %4ss  %s: %s' 0 "$label" "$SKIP_REASON")")
    return 0
  fi
  if [ "$max_s" -le 5 ]; then
    echo "SKIP: no time left in the ${BUDGET_S}s budget"
    SUMMARY+=("$(printf 'SKIP     %4ss  %s: no time left' 0 "$label")")
    return 0
  fi
  began="$(date +%s)"
  timeout -k 10 "$max_s" bash -c "$command"
  status=$?
  case "$status" in
    0) verdict=PASS ;;
    124 | 137) verdict=TIMEOUT ;;
    *) verdict=FAIL ;;
  esac
  echo "=== ${STEP_NAMES[$index]}: $verdict (exit $status) ==="
  SUMMARY+=("$(printf '%-8s %4ss  %s' "$verdict" "$(($(date +%s) - began))" "$label")")
  return "$status"
}

# --- the machine ------------------------------------------------------------------------

facts() {
  echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host:    $(hostname) ($(nproc) cores, $(uname -r))"
  echo "memory:  $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB RAM, " $7 " GiB available"}')"
  echo "disk:    $(df -h . 2>/dev/null | awk 'NR == 2 {print $4 " free on " $1}')"
  echo "shm:     $(df -h /dev/shm 2>/dev/null | awk 'NR == 2 {print $2}')"
  echo "glibc:   $(ldd --version 2>/dev/null | head -1)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total,memory.used \
      --format=csv
  else
    echo "nvidia-smi: not found"
  fi
}

# The folders holding a library whose file name starts with $1 (e.g. libcublas.so.13),
# best first: the toolkit, ldconfig's cache, a Python environment's nvidia/*/lib.
find_library_dirs() {
  local pattern="$1"
  {
    for root in "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-13* /opt/cuda; do
      [ -n "$root" ] && ls "$root"/lib64/"$pattern"* 2>/dev/null
    done
    ldconfig -p 2>/dev/null | awk -v p="$pattern" '$1 ~ "^"p {print $NF}'
    local site
    for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) \
                /usr/local/lib/python3*/dist-packages /opt/conda/lib/python3*/site-packages; do
      ls "$site"/nvidia/*/lib/"$pattern"* 2>/dev/null
    done
  } | xargs -r -n1 dirname 2>/dev/null | awk '!seen[$0]++'
}

# The kit unpacked (a tarball from gpu_kit.sh, or loose bin/ and lib/), its manifest shown;
# where there is none, KIT_FAILURE says why (step 1 fails with it).
unpack_kit() {
  if [ -d "$kit_dir/bin" ]; then
    KIT="$kit_dir"
  elif [ -f "$kit_dir/kit.tar.xz" ]; then
    KIT="$(mktemp -d /tmp/strata-kit.XXXXXX)"
    tar -C "$KIT" -xJf "$kit_dir/kit.tar.xz" || {
      KIT_FAILURE="the GPU kit $kit_dir/kit.tar.xz does not unpack (rebuild it with tools/gpu_kit.sh)"
      return 1
    }
  else
    KIT_FAILURE="no GPU kit at $kit_dir (build it with tools/gpu_kit.sh; the device tool carries .gpu)"
    return 1
  fi
  # The manifest only informs: a kit without one still runs.
  head -6 "$KIT/MANIFEST.txt" 2>/dev/null || echo "(the kit has no MANIFEST.txt)"
  return 0
}

# Every binary of the kit finds its libraries.
kit_loads() {
  local binary bad=0
  for binary in "$KIT"/bin/*; do
    # grep without -q reads all of ldd's output: with pipefail, a grep -q that stops at its
    # first match can leave the writer a SIGPIPE and the test false.
    if ldd "$binary" | grep "not found" >/dev/null; then
      echo "$(basename "$binary"): $(ldd "$binary" | grep 'not found' | tr '\n' ' ')"
      bad=1
    fi
  done
  "$KIT/bin/strata" train --help-config >/dev/null || bad=1
  [ "$bad" -eq 0 ] && echo "every binary finds its libraries"
  return "$bad"
}

# A gtest binary of the kit; a test skipped for want of a GPU fails the step here.
gpu_test() {
  local output status
  output="$("$KIT/bin/$1" "${@:2}" 2>&1)"
  status=$?
  echo "$output" | tail -60
  if grep -q "no usable GPU" <<<"$output"; then
    echo "FAIL: skipped for want of a usable GPU on a GPU machine"
    return 1
  fi
  return "$status"
}

# Several gpu_test binaries in one step, each run even if one before it failed (a step's
# line should say all that is wrong, not the first thing).
gpu_tests() {
  local binary failed=0
  for binary in "$@"; do
    echo "--- $binary"
    gpu_test "$binary" || failed=1
  done
  return "$failed"
}
device_tests() { gpu_tests cuda_device_test fill_kernel_test; }
nccl_tests() { gpu_tests nccl_library_test nccl_communicator_test; }

# 30 steps of the built-in GPT (or, with arguments, e.g. --set model.preset=llama-tiny, the
# model they name) on the CPU (fp32) and on CUDA (fp32, bf16), side by side.
trajectories() {
  local dir common=(--set train.steps=30 --set train.eval_every=0 --set train.log_every=10 "$@")
  dir="$(mktemp -d)"
  "$KIT/bin/strata" train "${common[@]}" --set device.backend=cpu --metrics "$dir/cpu.jsonl" ||
    return 1
  "$KIT/bin/strata" train "${common[@]}" --set device.backend=cuda --metrics "$dir/cuda.jsonl" ||
    return 1
  "$KIT/bin/strata" train "${common[@]}" --set device.backend=cuda --set train.dtype=bf16 \
    --metrics "$dir/bf16.jsonl" || return 1
  paste <(grep -o '"loss":[0-9.e+-]*' "$dir/cpu.jsonl" | cut -d: -f2) \
    <(grep -o '"loss":[0-9.e+-]*' "$dir/cuda.jsonl" | cut -d: -f2) \
    <(grep -o '"loss":[0-9.e+-]*' "$dir/bf16.jsonl" | cut -d: -f2) |
    awk 'BEGIN {print "step  cpu fp32   cuda fp32  cuda bf16"}
         {d = ($2 - $1) / $1; d = d < 0 ? -d : d; if (d > f) f = d;
          b = ($3 - $1) / $1; b = b < 0 ? -b : b; if (b > w) w = b;
          printf "%4d  %9.5f  %9.5f  %9.5f\n", NR, $1, $2, $3}
         END {printf "largest relative difference to the CPU: fp32 %.2e, bf16 %.2e (goal: bf16 <= 1e-2)\n", f, w;
              exit (NR == 30 && w <= 1e-2) ? 0 : 1}'
}

# The built-in GPT, then llama-tiny: 30 steps each on the CPU and on CUDA (both run even
# if the first fails).
train_comparison() {
  local failed=0
  echo "--- the built-in GPT"
  trajectories || failed=1
  echo "--- llama-tiny"
  trajectories --set model.preset=llama-tiny || failed=1
  return "$failed"
}

# strata sample on CUDA (KV-cache decode, and the context sliding past the model's 32
# positions) against the CPU, greedy, from a llama-tiny checkpoint trained on the CPU: both
# must give 40 new tokens; whether the texts agree is printed (a random model's logits sit
# near ties, so fp32 sums in another order may pick another token).
cuda_sample() {
  local dir
  dir="$(mktemp -d)"
  "$KIT/bin/strata" train --set model.preset=llama-tiny --set model.max_seq_len=32 \
    --set train.seq_len=32 --set train.steps=3 --set train.eval_every=0 \
    --set train.checkpoint_dir="$dir/ck" --set train.checkpoint_every=3 > "$dir/train.txt" 2>&1 ||
    { tail -5 "$dir/train.txt"; return 1; }
  local backend dtype
  for backend in cpu cuda; do
    for dtype in fp32 bf16; do
      [ "$backend" = cpu ] && [ "$dtype" = bf16 ] && continue
      "$KIT/bin/strata" sample --from "$dir/ck" --prompt "Anne" --tokens 40 --temperature 0 \
        --set device.backend="$backend" --set train.dtype="$dtype" \
        > "$dir/$backend-$dtype.txt" 2> "$dir/$backend-$dtype.err" ||
        { tail -5 "$dir/$backend-$dtype.err"; return 1; }
      grep -q "context slides" "$dir/$backend-$dtype.err" || { cat "$dir/$backend-$dtype.err"; return 1; }
      echo "$backend $dtype: $(tail -1 "$dir/$backend-$dtype.err")"
    done
  done
  if cmp -s "$dir/cpu-fp32.txt" "$dir/cuda-fp32.txt"; then
    echo "greedy text: CUDA fp32 = CPU fp32"
  else
    echo "greedy text differs (CPU fp32 / CUDA fp32):"; cat "$dir/cpu-fp32.txt" "$dir/cuda-fp32.txt"
  fi
}

# A traced stage-3 run on CUDA: the trace's compute spans come from CUDA events (device
# time); each step's compute waits must sum to its compute_stall_ms within 1 ms.
cuda_trace() {
  local dir
  dir="$(mktemp -d)"
  "$KIT/bin/strata" train --set device.backend=cuda --set zero.stage=3 --set zero.world=1 \
    --set train.steps=4 --set train.eval_every=0 --set train.trace_steps=2:3 \
    --metrics "$dir/m.jsonl" --trace "$dir/t.json" || return 1
  command -v python3 >/dev/null || { echo "no python3 to read the trace"; return 1; }
  python3 - "$dir/t.json" "$dir/m.jsonl" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
stall = {json.loads(l)["step"]: json.loads(l)["compute_stall_ms"] for l in open(sys.argv[2])}
ev = trace["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
spans = [e for e in ev if e["ph"] == "X"]
on = lambda t: sorted((e for e in spans if names[e["tid"]] == t), key=lambda e: e["ts"])
compute, ok = on("compute"), True
print("compute spans:", len(compute), "names:", sorted({e["name"] for e in compute})[:8])
if not any(e["name"].startswith("forward ") for e in compute):
    print("FAIL: no forward spans on compute"); ok = False
for a, b in zip(compute, compute[1:]):
    if b["ts"] < a["ts"] + a["dur"] - 0.001:
        print("FAIL: overlap on compute:", a["name"], b["name"]); ok = False; break
for s in on("steps"):
    n = int(s["name"].split()[1])
    w = sum(e["dur"] for e in compute if e["name"] == "wait" and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]) / 1000
    print(f"{s['name']}: waits {w:.3f} ms, compute_stall_ms {stall[n]:.3f}")
    ok = ok and abs(w - stall[n]) <= 1.0
sys.exit(0 if ok else 1)
PY
}

# Each test of the trajectory binary in a process of its own.
trajectory_tests() {
  local test failed=0
  for test in $("$KIT/bin/gpu_training_test" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}'); do
    timeout -k 5 60 "$KIT/bin/gpu_training_test" --gtest_filter="$test" 2>&1 |
      grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|no usable GPU" || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
  done
  return "$failed"
}

# The GPU benchmark (its lines also go to $BENCH_LOG for the summary's goal lines); the
# NVMe placement writes its swap files under the checkout (a disk; /tmp may be tmpfs).
bench() {
  local nvme_dir status
  nvme_dir="$(mktemp -d "$PWD/.gpu-bench-nvme.XXXXXX")"
  "$KIT/bin/strata" bench gpu --steps 5 --nvme-dir "$nvme_dir" "$@" 2>&1 | tee -a "$BENCH_LOG"
  status=${PIPESTATUS[0]}
  rm -rf "$nvme_dir"
  return "$status"
}

# The same gpt2-124m placements with the CUDA-core flash attention instead of the GEMM one
# (tensor cores), for the comparison; its lines are prefixed "flash:" and stay out of the
# summary's goal lines.
bench_flash() {
  "$KIT/bin/strata" bench gpu --steps 5 --presets gpt2-124m --nvme-presets "" \
    --set device.cuda_attention=flash 2>&1 | sed 's/^/flash: /'
  return "${PIPESTATUS[0]}"
}

# The Hugging Face import into a CUDA engine against the disk's sequential read (its files
# under the checkout: a disk); the goal line goes to $BENCH_LOG too. On the CPU backend here
# the engine's own state writes share two CPUs' memory bandwidth with the reading. Twice:
# the optimizer on the device (fp32 files: values through the importer's buffers, copied
# up), then on the host with bf16 files (values straight into the pinned master:
# Engine::ImportTarget; the files' bf16 bits copied up to the params from the importer's
# buffers, no host cast).
import_bench() {
  local dir status=0
  dir="$(mktemp -d "$PWD/.gpu-bench-import.XXXXXX")"
  "$KIT/bin/strata" bench import --dir "$dir" --set device.backend=cuda 2>&1 | tee -a "$BENCH_LOG"
  status=${PIPESTATUS[0]}
  "$KIT/bin/strata" bench import --dir "$dir" --set device.backend=cuda \
    --set zero.optimizer_tier=host --set zero.stage=1 --file-dtype bf16 2>&1 | tee -a "$BENCH_LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  rm -rf "$dir"
  return "$status"
}

memcheck() {
  local sanitizer
  sanitizer="$(command -v compute-sanitizer || ls "${CUDA_PATH:-/usr/local/cuda}"/bin/compute-sanitizer 2>/dev/null)"
  [ -n "$sanitizer" ] || { echo "no compute-sanitizer"; return 1; }
  "$sanitizer" --tool memcheck --error-exitcode 3 "$KIT/bin/cuda_ops_test" | tail -20
}

BENCH_LOG="$(mktemp)"
export KIT BENCH_LOG
export -f kit_loads gpu_test gpu_tests device_tests nccl_tests trajectories train_comparison \
  cuda_trace cuda_sample trajectory_tests bench bench_flash import_bench memcheck

main() {
  echo "strata GPU check$([ "$dry_run" -eq 1 ] && echo ' (dry run: every step is skipped)')"
  echo "budget: ${BUDGET_S}s; results in $RESULTS"
  [ ${#only[@]} -gt 0 ] &&
    echo "only: $(selected_line) (step 1 always runs: the other steps run the kit's binaries)"
  print_plan
  facts

  if [ "$dry_run" -eq 1 ]; then
    SKIP_REASON="dry run"
  elif ! unpack_kit; then
    SKIP_REASON="no GPU kit"
  fi
  export KIT

  # cuBLAS (the kernels need it) and NCCL (two GPU ranks need it) where the machine has
  # them: on the library path of every step.
  local dirs
  dirs="$({ find_library_dirs libcublas.so.13; find_library_dirs libnccl.so.2; } | awk '!seen[$0]++')"
  echo "cuBLAS and NCCL folders found: $(echo $dirs | tr ' ' ':')"
  LD_LIBRARY_PATH="$(echo $dirs | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  if [ -z "${SKIP_REASON:-}" ] && ! command -v nvidia-smi >/dev/null; then
    SKIP_REASON="no nvidia-smi: not a GPU machine"
  fi

  local index
  for index in "${!STEP_NAMES[@]}"; do
    step "$index"
  done

  echo
  echo "=== summary ($(($(date +%s) - START_S))s of ${BUDGET_S}s) ==="
  printf '%s\n' "${SUMMARY[@]}"
  grep -E "^GPU:|(>=|<=).*(MET|not measured|not run)" "$BENCH_LOG" 2>/dev/null | head -20
  # Not `| grep -q`: under pipefail, printf could take a SIGPIPE once grep has its first
  # match (the missing kit's FAIL is the first line) and the check would not fail.
  if printf '%s\n' "${SUMMARY[@]}" | grep -E '^(FAIL|TIMEOUT)' >/dev/null; then
    echo "GPU CHECK FAILED"
    return 1
  fi
  if [ -n "${SKIP_REASON:-}" ]; then
    echo "GPU CHECK SKIPPED: $SKIP_REASON"
    return 0
  fi
  if [ ${#only[@]} -gt 0 ]; then
    echo "GPU CHECK PASSED (only steps $(selected_line))"
    return 0
  fi
  echo "GPU CHECK PASSED"
}

main 2>&1 | tee "$RESULTS"
exit "${PIPESTATUS[0]}"
