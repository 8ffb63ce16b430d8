#!/usr/bin/env bash
# Fails when docs/testing.md does not list every test target of the tree, or lists one that
# no longer exists. A test target is a cc_test or sh_test of a BUILD file (also inside a
# list comprehension), the `NAME_test` a cpu_kernel(name = NAME) macro declares or the
# `NAME_replay_test` a fuzz_target(name = NAME) declares (fuzz/fuzz_target.bzl); the page
# names each by its label, `//package:name`.
# Run by the test suite (//tools:testing_doc_test) and by hand: tools/check_testing_doc.sh [ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
doc=docs/testing.md
[ -f "$doc" ] || { echo "testing doc: $root/$doc is missing"; exit 1; }

targets="$(mktemp)"
listed="$(mktemp)"
trap 'rm -f "$targets" "$listed"' EXIT
while IFS= read -r build; do
  package="${build%/BUILD}"
  package="${package#./}"
  awk -v package="$package" '
    /^\[?(cc_test|sh_test)\(/ { want = "" ; in_test = 1; next }
    /^\[?cpu_kernel\(/ { want = "_test"; in_test = 1; next }
    /^\[?fuzz_target\(/ { want = "_replay_test"; in_test = 1; next }
    in_test && /^[[:space:]]*name = "/ {
      match($0, /"[^"]+"/)
      print "//" package ":" substr($0, RSTART + 1, RLENGTH - 2) want
      in_test = 0
    }' "$build"
done < <(find . -name BUILD -not -path './bazel-*' -not -path './third_party/*' | sort) |
  sort -u > "$targets"
grep -oE '`//[a-z0-9_/]+:[a-z0-9_]+`' "$doc" | tr -d '`' | sort -u > "$listed"

problems=0
while IFS= read -r label; do
  echo "testing doc: $label is a test target, but $doc does not list it"
  problems=$((problems + 1))
done < <(comm -23 "$targets" "$listed")
while IFS= read -r label; do
  echo "testing doc: $doc lists $label, which is no test target of the tree"
  problems=$((problems + 1))
done < <(comm -13 "$targets" "$listed")
count=$(wc -l < "$targets")
if [ "$count" -eq 0 ]; then
  echo "testing doc: no test targets found under $root"
  exit 1
fi
if [ "$problems" -gt 0 ]; then
  echo "testing doc: $problems problem(s) ($count test targets in the tree)"
  exit 1
fi
echo "testing doc: all $count test targets listed"
