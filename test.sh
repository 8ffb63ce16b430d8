#!/usr/bin/env bash
# One command: install what is missing, build everything (CUDA sources too where nvcc
# exists) and run every test. GPU tests skip with a reason where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")"
tools/install_deps.sh
bazel test --keep_going --nocache_test_results //... "$@"
