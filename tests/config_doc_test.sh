#!/usr/bin/env bash
# docs/config.md's key listing must be exactly what `strata train --help-config` prints
# (regenerate it with tools/gen_config_doc.sh).
set -uo pipefail
strata="$1"
doc="$2"
expected="$(mktemp)"
trap 'rm -f "$expected"' EXIT
"$strata" train --help-config > "$expected" || { echo "FAIL: --help-config failed"; exit 1; }
[ -s "$expected" ] || { echo "FAIL: --help-config printed nothing"; exit 1; }
if ! diff -u <(sed -n '/^```text$/,/^```$/p' "$doc" | sed '1d;$d') "$expected"; then
  echo "FAIL: $doc is stale: run tools/gen_config_doc.sh"
  exit 1
fi
echo "docs/config.md matches --help-config ($(wc -l < "$expected") lines)"
