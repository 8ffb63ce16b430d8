#!/usr/bin/env bash
# See tools/BUILD: the layering check on a made-up tree (an upward and a sideways include
# must fail, a downward one pass), then on this checkout.
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

root="$(dirname "$(dirname "$script")")"
"$script" "$root"
