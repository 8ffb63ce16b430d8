#!/usr/bin/env bash
# Seeing many ranks across simulated nodes: with the trace in each node's local directory,
# every rank writes its own file on its node and rank 0 one merged file (a process per
# rank) on node0; the ranks' clocks are made to disagree (STRATA_FAULT_TRACE_CLOCK: rank k's
# clock k x 1000 s ahead, since simulated nodes share one clock) and the merged trace still
# has every rank's step spans within 100 ms of rank 0's; `strata report` of it has a table of
# every rank and a verdict on stragglers.
# Usage (from Bazel): observe_test.sh <strata> <nodes.sh> (runs.sh beside it)
set -uo pipefail
source "$(dirname "$2")/runs.sh"
runs_start "$1" 2

STRATA_FAULT_TRACE_CLOCK=1000000 NODES_TIMEOUT=180 nodes_mpirun node0:2,node1:2 \
  -x STRATA_FAULT_TRACE_CLOCK -- "$strata" train --set model.preset=tiny \
  --set model.channels=32 --set train.seq_len=16 --set train.steps=4 --set train.eval_every=0 \
  --set train.micro_batch=2 --set device.threads=1 --set zero.stage=3 \
  --set train.trace_steps=2:3 --trace "$NODES_LOCAL/t.json" \
  --metrics "$NODES_SHARED/m.jsonl" > "$tmp/run.log" 2>&1 \
  || { tail -30 "$tmp/run.log"; fail "the traced run failed"; }

node0="$(nodes_local_dir 0)" node1="$(nodes_local_dir 1)"
[ "$(cd "$node0" && ls t*.json | tr '\n' ' ')" = "t.json t.rank0.json t.rank1.json " ] \
  || fail "node0 holds $(ls "$node0")"
[ "$(cd "$node1" && ls t*.json | tr '\n' ' ')" = "t.rank2.json t.rank3.json " ] \
  || fail "node1 holds $(ls "$node1")"
grep -q "every rank's file merged into $NODES_LOCAL/t.json" "$tmp/run.log" \
  || fail "the log does not say where the merged trace went"

python3 - "$node0/t.json" "$node1/t.rank2.json" << 'PY' || fail "the merged trace is wrong"
import json, sys
merged = json.load(open(sys.argv[1]))
own = json.load(open(sys.argv[2]))
ranks = merged["otherData"]["ranks"]
assert merged["otherData"]["merged"] and len(ranks) == 4, merged["otherData"]
for k, other in enumerate(ranks):
    # Rank k's clock was k x 1000 s ahead: the offset measured says so, within 1 s.
    assert abs(other["clock_offset_us"] - k * 1e9) < 1e6, (k, other["clock_offset_us"])
assert abs(own["otherData"]["clock_offset_us"] - 2e9) < 1e6, own["otherData"]
steps = {}
for e in merged["traceEvents"]:
    if e["ph"] == "M" and e["name"] == "process_name":
        assert e["args"]["name"] == "rank %d" % e["pid"], e
    if e["ph"] == "X" and e["name"].startswith("step "):
        steps.setdefault(e["name"], {})[e["pid"]] = e["ts"]
assert sorted(steps) == ["step 2", "step 3"], sorted(steps)
for name, begins in steps.items():
    assert sorted(begins) == [0, 1, 2, 3], (name, begins)
    spread_ms = (max(begins.values()) - min(begins.values())) / 1000
    assert spread_ms < 100, "%s: ranks' begins %.1f ms apart: %s" % (name, spread_ms, begins)
    print("%s: the 4 ranks begin within %.2f ms of each other" % (name, spread_ms))
# Rank 2's own file is on the same timeline as the merged one.
own_steps = {e["name"]: e["ts"] for e in own["traceEvents"] if e["ph"] == "X" and e["name"].startswith("step ")}
assert own_steps["step 2"] == steps["step 2"][2], (own_steps, steps["step 2"])
PY

"$strata" report "$NODES_SHARED/m.jsonl" --trace "$node0/t.json" --out "$tmp/report" \
  > "$tmp/report.log" 2>&1 || { cat "$tmp/report.log"; fail "strata report of the merged trace"; }
page="$tmp/report/index.html"
grep -q "Ranks (from the merged trace)" "$page" || fail "no ranks table in the report"
grep -qE "is the straggler: its compute|No straggler: every rank" "$page" \
  || fail "no verdict on stragglers in the report"
[ "$(grep -o '<td>step [23]</td><td>[0-3]</td>' "$page" | sort -u | wc -l)" -eq 8 ] \
  || fail "the ranks table lacks a row per rank and traced step"
echo PASS
