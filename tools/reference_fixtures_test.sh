#!/usr/bin/env bash
# Committed fixtures are what their numpy reference writes now: SCRIPT runs again into a
# temporary directory and every file of FIXTURES must be equal byte for byte, with none
# missing or extra (so an edit of the script or of the specification it follows cannot
# leave stale fixtures behind), and at least MIN_FILES written. Needs python3 with numpy
# (python3-numpy, tools/install_deps.sh): the first of `python3` and /usr/bin/python3 that
# imports it. Usage: reference_fixtures_test.sh SCRIPT FIXTURES MIN_FILES
# (//tools:quant_reference_test, //tools:adam8bit_reference_test).
set -uo pipefail
script="$1" fixtures="$2" min_files="$3"
python=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c 'import numpy' > /dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
[ -n "$python" ] || { echo "FAIL: no python3 with numpy (apt-get install python3-numpy)"; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
out="$tmp/$(basename "$fixtures")"
"$python" "$script" "$out" || { echo "FAIL: $script exited with $?"; exit 1; }
# diff -r follows the runfiles' links to the committed files.
if ! diff -r "$fixtures" "$out"; then
  echo "FAIL: $fixtures differs from what $script writes; regenerate with"
  echo "  python3 $script $fixtures"
  exit 1
fi
count="$(ls "$out" | wc -l)"
[ "$count" -ge "$min_files" ] || { echo "FAIL: only $count files written"; exit 1; }
echo "PASS: $count fixture files are current"
