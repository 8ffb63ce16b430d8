#!/usr/bin/env bash
# Fails when a folder includes from a folder above it in the layer order of docs/design.md
# (dependencies point down only), or from a sibling of its own layer; and when the files of
# one folder depend on each other in a cycle. Each line below is one layer, lowest first; a
# folder may include its own files and those of lower layers. Within a folder a component
# is a header and its .cc (plan.h + plan.cc): component A depends on B when a file of A
# includes B's header, and no chain of such dependencies may lead from a component back to
# itself (a forward declaration does not hide one: plan.cc including plan_probe.h whose
# header includes plan.h is a cycle).
# Run by the test suite (//tools:check_layers_test) and by hand: tools/check_layers.sh [ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

LAYERS=(
  "core"
  "simgpu"
  "device"
  "data kernels collectives nvme"
  "tiers"
  "runtime"
  "models"
  "config"
  "checkpoint"
  "interop"
  "session sample"
  "plan report"
  "bench"
  "launch"
  "tests tools fuzz"
)

declare -A rank
for i in "${!LAYERS[@]}"; do
  for folder in ${LAYERS[$i]}; do rank[$folder]=$i; done
done

problems=0
checked=0
edges="$(mktemp)"
trap 'rm -f "$edges"' EXIT
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
    if [ "$target" = "$top" ]; then
      # Same top folder: an edge between components when both sit in the same directory.
      if [ "${included%/*}" = "${file%/*}" ]; then
        echo "${file%.*} ${included%.*}" >> "$edges"
      fi
      continue
    fi
    if [ "${rank[$target]}" -ge "${rank[$top]}" ]; then
      echo "layering: $file includes \"$included\": $target/ is not below $top/"
      problems=$((problems + 1))
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" || true)
done < <(find . -path ./third_party -prune -o -path './bazel-*' -prune -o \
           \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print |
         sed 's|^\./||' | sort)

# Cycles among one folder's components: every component that reaches itself, grouped by
# the set of components on its cycles (one line per cycle group).
cycles=$(awk '
  $1 != $2 { next_of[$1] = next_of[$1] " " $2; nodes[$1] = 1; nodes[$2] = 1 }
  function reach(from, to,    list, n, i, queue, head, seen, node) {
    # breadth-first: does `from` reach `to`?
    delete seen; queue[1] = from; head = 1; n = 1; seen[from] = 1
    while (head <= n) {
      node = queue[head++]
      split(next_of[node], list, " ")
      for (i in list) {
        if (list[i] == to) return 1
        if (!(list[i] in seen)) { seen[list[i]] = 1; queue[++n] = list[i] }
      }
    }
    return 0
  }
  END {
    for (a in nodes) {
      group = ""
      for (b in nodes) if (a != b && reach(a, b) && reach(b, a)) group = group " " b
      if (group == "") continue
      split(a group, members, " "); m = 0
      for (k in members) sorted[++m] = members[k]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
        if (sorted[j] < sorted[i]) { t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t }
      line = sorted[1]; for (i = 2; i <= m; i++) line = line " <-> " sorted[i]
      printed[line] = 1; delete sorted
    }
    for (line in printed) print line
  }' "$edges" | sort)
if [ -n "$cycles" ]; then
  while IFS= read -r cycle; do
    echo "layering: files of one folder depend on each other in a cycle: $cycle"
    problems=$((problems + 1))
  done <<< "$cycles"
fi

if [ "$checked" -eq 0 ]; then
  echo "layering: no source files found under $root"
  exit 1
fi
if [ "$problems" -gt 0 ]; then
  order=$(printf ' < %s' "${LAYERS[@]}")
  echo "layering: $problems problem(s): includes that point up or sideways, or cycles within a folder ($checked files checked; layer order: ${order:3})"
  exit 1
fi
echo "layering: $checked files, every include points down"
