#!/usr/bin/env bash
# Installs strata's build and test dependencies from Debian's packages (run as root on
# Debian 12). Installs only what is missing, so a second run takes a second. The CUDA
# toolkit and NCCL are not Debian packages: they are used when /usr/local/cuda exists.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-skylib  # the build (Bazel 4.2.3, offline)
  g++                                           # the compiler
  libabsl-dev                                   # Status / StatusOr, string formatting
  libdnnl-dev                                   # oneDNN: CPU matmuls (fp32 and bf16)
  nlohmann-json3-dev                            # config files and JSONL metrics
  libcli11-dev                                  # command-line parsing
  libspdlog-dev libfmt-dev                      # rank-prefixed logging
  libxxhash-dev                                 # checksums of NVMe extents
  liburing-dev                                  # io_uring NVMe engine
  libopenmpi-dev openmpi-bin                    # multi-process ranks under mpirun
  libgtest-dev libbenchmark-dev                 # tests and micro-benchmarks
  fio                                           # disk benchmark reference
  patchelf                                      # the GPU kit's RPATHs (tools/gpu_kit.sh)
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
