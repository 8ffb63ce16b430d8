#!/usr/bin/env bash
# One command: install what is missing, build, and train the built-in GPT on the embedded
# default corpus (no download). Extra arguments go to `strata train`, e.g.
#   ./train.sh --set train.steps=500 --metrics runs/metrics.jsonl
set -euo pipefail
cd "$(dirname "$0")"
tools/install_deps.sh
bazel build //launch:strata
exec bazel-bin/launch/strata train --config configs/default.json "$@"
