#!/usr/bin/env bash
# See tools/BUILD: the layering check on a made-up tree (an upward and a sideways include
# must fail, a downward one pass; a cycle between two components of one folder, made through
# a .cc, must fail naming both), then on this checkout.
set -uo pipefail
script="$(readlink -f tools/check_layers.sh)"
fail() { echo "FAIL: $*"; exit 1; }

fake="$(mktemp -d)"
trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/core" "$fake/tiers" "$fake/nvme" "$fake/data"
echo '#include "core/status.h"' > "$fake/tiers/home.h"
echo '#include <vector>' > "$fake/core/status.h"
"$script" "$fake" > "$fake/out.txt" || fail "a downward include was refused: $(cat "$fake/out.txt")"
echo '#include "tiers/home.h"' >> "$fake/core/status.h"
"$script" "$fake" > "$fake/out.txt" && fail "an upward include (core -> tiers) passed"
grep -q 'core/status.h includes "tiers/home.h"' "$fake/out.txt" || fail "the upward include is not named: $(cat "$fake/out.txt")"
sed -i '$d' "$fake/core/status.h"
echo '#include "data/tokens.h"' > "$fake/nvme/engine.cc"
"$script" "$fake" > "$fake/out.txt" && fail "a sideways include (nvme -> data) passed"
rm "$fake/nvme/engine.cc"
"$script" "$fake" > "$fake/out.txt" || fail "the tree without the sideways include was refused"
# plan.cc -> probe.h -> plan.h: no file includes itself, but the components form a cycle.
mkdir -p "$fake/plan"
echo '#include "core/status.h"' > "$fake/plan/plan.h"
echo '#include "plan/plan.h"' > "$fake/plan/probe.h"
"$script" "$fake" > "$fake/out.txt" || fail "a one-way dependency in a folder was refused: $(cat "$fake/out.txt")"
printf '#include "plan/plan.h"\n#include "plan/probe.h"\n' > "$fake/plan/plan.cc"
"$script" "$fake" > "$fake/out.txt" && fail "a cycle between plan and probe passed"
grep -q 'cycle: plan/plan <-> plan/probe' "$fake/out.txt" || fail "the cycle is not named: $(cat "$fake/out.txt")"

root="$(dirname "$(dirname "$script")")"
"$script" "$root"
