#!/usr/bin/env bash
# The fixtures of kernels/cpu/testdata/adam8bit/ are what tools/adam8bit_reference.py writes now:
# the script runs again into a temporary directory and every file must be equal byte for
# byte, with none missing or extra (so an edit of the script or of the specification it
# follows cannot leave stale fixtures behind). Needs python3 with numpy (python3-numpy,
# tools/install_deps.sh): the first of `python3` and /usr/bin/python3 that imports it.
set -uo pipefail
script=tools/adam8bit_reference.py
fixtures=kernels/cpu/testdata/adam8bit
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
"$python" "$script" "$tmp/adam8bit" || { echo "FAIL: $script exited with $?"; exit 1; }
# diff -r follows the runfiles' links to the committed files.
if ! diff -r "$fixtures" "$tmp/adam8bit"; then
  echo "FAIL: $fixtures differs from what $script writes; regenerate with"
  echo "  python3 $script $fixtures"
  exit 1
fi
count="$(ls "$tmp/adam8bit" | wc -l)"
[ "$count" -eq 24 ] || { echo "FAIL: only $count files written"; exit 1; }
echo "PASS: $count fixture files are current"
