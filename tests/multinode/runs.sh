# Sourced by the tests of tests/multinode that run strata across simulated nodes (nodes.sh
# beside it): `runs_start STRATA N` makes the binary's path absolute ($strata), requires
# root and brings N nodes up ($tmp holds the logs); `fail`; `losses FILE` (a metrics file's
# losses, one per line); `common`: the tiny 12-step training of the equivalence tests; and
# `run TAG HOSTS [ARGS...]`: that training under mpirun across HOSTS (Open MPI's -H list)
# with ARGS after it, its metrics in the shared directory ($NODES_SHARED/TAG.jsonl: rank 0
# writes them), its log in $tmp/TAG.log, failing unless it reached the last step.
source "$(dirname "${BASH_SOURCE[0]}")/nodes.sh"

runs_start() {
  strata="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
  nodes_require_root
  nodes_up "$2"
  tmp="${TEST_TMPDIR:-$NODES_DIR}"
}

fail() { echo "FAIL: $*"; exit 1; }
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }

common=(--set model.preset=tiny --set model.channels=32 --set train.seq_len=16
        --set train.steps=12 --set train.grad_accum=2 --set train.eval_every=0
        --set train.lr=3e-3 --set device.threads=1 --set zero.comm_timeout_s=60
        --set train.micro_batch=2)

run() {
  local tag="$1" hosts="$2" steps=12 arg
  shift 2
  for arg in "$@"; do
    [[ "$arg" == train.steps=* ]] && steps="${arg#train.steps=}"
  done
  NODES_TIMEOUT=180 nodes_mpirun "$hosts" -- "$strata" train "${common[@]}" "$@" \
    --metrics "$NODES_SHARED/$tag.jsonl" > "$tmp/$tag.log" 2>&1 \
    || { tail -30 "$tmp/$tag.log"; fail "$tag: mpirun -H $hosts failed"; }
  [ "$(grep -o '"step":[0-9]*' "$NODES_SHARED/$tag.jsonl" | tail -1)" = "\"step\":$steps" ] \
    || fail "$tag: did not reach step $steps"
}
