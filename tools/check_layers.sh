#!/usr/bin/env bash
# Fails when a folder includes from a folder above it in the layer order of docs/design.md
# (dependencies point down only), or from a sibling of its own layer. Each line below is one
# layer, lowest first; a folder may include its own files and those of lower layers.
# Run by the test suite (//tools:check_layers_test) and by hand: tools/check_layers.sh [ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

LAYERS=(
  "core"
  "data kernels collectives nvme"
  "tiers"
  "runtime"
  "models"
  "launch"
  "tests tools"
)

declare -A rank
for i in "${!LAYERS[@]}"; do
  for folder in ${LAYERS[$i]}; do rank[$folder]=$i; done
done

problems=0
checked=0
while IFS= read -r file; do
  top="${file%%/*}"
  [ -n "${rank[$top]+x}" ] || continue
  checked=$((checked + 1))
  while IFS= read -r line; do
    included="${line#*\"}"
    included="${included%%\"*}"
    target="${included%%/*}"
    [ "$target" = "$included" ] && continue         # no folder: not a project header
    [ -n "${rank[$target]+x}" ] || continue          # absl/, nlohmann/, ...: not ours
    [ "$target" = "$top" ] && continue
    if [ "${rank[$target]}" -ge "${rank[$top]}" ]; then
      echo "layering: $file includes \"$included\": $target/ is not below $top/"
      problems=$((problems + 1))
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" || true)
done < <(find . -path ./third_party -prune -o -path './bazel-*' -prune -o \
           \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print |
         sed 's|^\./||' | sort)

if [ "$checked" -eq 0 ]; then
  echo "layering: no source files found under $root"
  exit 1
fi
if [ "$problems" -gt 0 ]; then
  order=$(printf ' < %s' "${LAYERS[@]}")
  echo "layering: $problems include(s) point up or sideways ($checked files checked; layer order: ${order:3})"
  exit 1
fi
echo "layering: $checked files, every include points down"
