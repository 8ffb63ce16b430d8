#!/usr/bin/env bash
# `strata report` end to end: a short ZeRO-Infinity run writes its metrics and trace, the
# report page is made from them, and a headless Chromium (Debian's chromium-headless-shell,
# under a hard timeout) renders it: every one of the five plots must have been drawn
# (the page counts them in body[data-charts]) and the page must load nothing from the
# network. Bad input to `strata report` is refused naming the file and line.
set -uo pipefail
strata="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$tmp/nv"
"$strata" train --set model.preset=tiny --set train.steps=4 --set train.seq_len=16 \
  --set train.micro_batch=2 --set train.eval_every=2 --set zero.stage=3 \
  --set zero.optimizer_tier=nvme --set zero.nvme_dir="$tmp/nv" \
  --set zero.nvme_allow_memory_fs=true --metrics "$tmp/m.jsonl" --trace "$tmp/t.json" \
  > "$tmp/train.txt" 2>&1 || { tail -5 "$tmp/train.txt"; fail "the traced run failed"; }
"$strata" report "$tmp/m.jsonl" --trace "$tmp/t.json" --out "$tmp/report" > "$tmp/out.txt" 2>&1 \
  || { cat "$tmp/out.txt"; fail "strata report failed"; }
page="$tmp/report/index.html"
[ -s "$page" ] || fail "no $page"
grep -q "4 steps, 2 traced" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "report line"; }
if grep -qE '(src|href)="https?:' "$page"; then fail "the page loads from the network"; fi

# Bad input: a file that is not a metrics file.
echo "not json" > "$tmp/bad.jsonl"
"$strata" report "$tmp/bad.jsonl" --out "$tmp/r2" > "$tmp/bad.txt" 2>&1
[ $? -eq 1 ] || fail "a bad metrics file was accepted"
grep -q "bad.jsonl line 1 is not JSON" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "bad file message"; }
[ ! -e "$tmp/r2/index.html" ] || fail "a page was written for a bad file"

browser="$(command -v chromium-headless-shell || command -v chromium || true)"
if [ -z "$browser" ]; then
  echo "SKIPPED: the rendering check (no chromium-headless-shell; tools/install_deps.sh installs it)"
  exit 0
fi
timeout 120 "$browser" --no-sandbox --disable-gpu --headless --dump-dom "file://$page" \
  > "$tmp/dom.html" 2> "$tmp/browser.txt"
rc=$?
[ "$rc" -eq 0 ] || { tail -5 "$tmp/browser.txt"; fail "the browser exited $rc"; }
grep -q 'data-charts="5"' "$tmp/dom.html" || {
  grep -o 'data-charts="[0-9]*"' "$tmp/dom.html"; fail "not all five plots were drawn"; }
for id in loss time memory nvme overlap; do
  grep -q "<canvas id=\"$id\"[^>]*data-drawn=\"1\"" "$tmp/dom.html" || fail "plot $id not drawn"
done
echo "report rendered: 5 plots drawn"
