#!/usr/bin/env bash
# Builds the GPU kit here (no GPU needed): the `strata` binary and every GPU test binary,
# optimised, for the CUDA architectures of third_party/cuda.bzl (sm_80, sm_90: A100, H100,
# H200), with their shared-library closure, into one ignored folder that travels to a
# bare, offline GPU machine (device tool: carry [".gpu"]) and runs there with no apt, no
# Bazel and no compiler (tools/gpu_check.sh). Project code is linked statically
# (--dynamic_mode=off); the Debian libraries it uses come along in .gpu/lib with an RPATH
# ($ORIGIN) that finds them.
#
# Per library, what the kit carries and why:
#   carried     every library ldd lists that is not below: abseil, oneDNN (+ its OpenCL
#               loader), spdlog, fmt, xxhash, liburing, Open MPI and what it pulls in,
#               libstdc++/libgcc_s/libgomp (the GPU machine's userland is newer: newer
#               copies would also do, but ours are what the build linked against), and the
#               CUDA runtime (libcudart: the version the build used; it is small).
#   left out    glibc (libc, libm, libpthread, libdl, librt, ld-linux): the GPU machine's is
#               newer and backward compatible, and a second glibc cannot be mixed in;
#               the driver (libcuda): it must be the machine's;
#               cuBLAS/cuBLASLt (~600 MB): the machine's CUDA 13 toolkit or Python
#               environment has them (gpu_check.sh finds them);
#               NCCL: not linked at all; loaded at run time only for more than one GPU
#               rank (collectives/nccl_library.h), found the same way.
# The kit is packed into .gpu/kit.tar.xz (the folder must stay under 48 MiB; the loose
# files are far larger) with .gpu/MANIFEST.txt (commit, date, files, sizes); gpu_check.sh
# unpacks it on arrival.
#
# Usage: tools/gpu_kit.sh [--prove ROOT]
#   --prove ROOT  also runs every binary of the kit inside ROOT, a minimal Debian made with
#                 `debootstrap --variant=minbase bookworm ROOT` (none of the development
#                 packages), with only the kit and this machine's CUDA runtime libraries
#                 (standing in for the GPU machine's toolkit) on the library path: each GPU
#                 test must skip with "no usable GPU", strata must train on the CPU.
# Tagged manual in spirit: never run by ./test.sh (it builds a second configuration).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly KIT=.gpu
readonly CUDA_LIB="${CUDA_PATH:-/usr/local/cuda}/lib64"
readonly BINARIES=(
  //launch:strata
  //kernels/cuda:cuda_ops_test
  //device/cuda:cuda_device_test
  //device/cuda:fill_kernel_test
  //collectives:nccl_communicator_test
  //collectives:nccl_library_test
  //tests:gpu_training_test
)
# Libraries the GPU machine provides (see above); matched on the soname's start.
readonly LEFT_OUT='^(libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux|libresolv\.so|libcuda\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|linux-vdso)'
readonly MAX_KIT_BYTES=$((48 * 1024 * 1024))

prove_root=""
if [ "${1:-}" = "--prove" ]; then
  prove_root="${2:?--prove needs the root of a minimal Debian}"
fi

tools/install_deps.sh
command -v patchelf >/dev/null || {
  echo "gpu_kit: patchelf is missing (tools/install_deps.sh installs it)"
  exit 1
}
if [ ! -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "gpu_kit: no nvcc under ${CUDA_PATH:-/usr/local/cuda}: the kit needs a CUDA build"
  exit 1
fi

echo "gpu_kit: building (-c opt, static project code, sm_80 + sm_90)"
bazel build -c opt --copt=-g0 --dynamic_mode=off "${BINARIES[@]}"
bin_dir="$(bazel info -c opt --dynamic_mode=off bazel-bin 2>/dev/null)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for label in "${BINARIES[@]}"; do
  path="${label#//}"
  path="${path/://}"
  install -m 755 "$bin_dir/$path" "$stage/bin/"
done

# The closure: every library ldd resolves for the binaries (and, transitively, for the
# libraries, which ldd already lists), minus what the GPU machine provides.
missing=0
for binary in "$stage"/bin/*; do
  while read -r name _ resolved _; do
    [ -n "$name" ] || continue
    if [ "$resolved" = "not" ]; then
      if ! [[ "$name" =~ $LEFT_OUT ]]; then
        echo "gpu_kit: $(basename "$binary") needs $name, which is not found here"
        missing=1
      fi
      continue
    fi
    [[ "$name" =~ $LEFT_OUT ]] && continue
    [ -f "$stage/lib/$name" ] || install -m 644 "$(readlink -f "$resolved")" "$stage/lib/$name"
  done < <(ldd "$binary" | awk '/=>/ {print $1, $2, $3, $4}')
done
[ "$missing" -eq 0 ] || exit 1

# Find each other here first: binaries in bin/, libraries in lib/; the toolkit's usual
# place after that (cuBLAS where the machine keeps it; gpu_check.sh adds what it finds).
for binary in "$stage"/bin/*; do
  strip --strip-unneeded "$binary"
  patchelf --set-rpath "\$ORIGIN/../lib:/usr/local/cuda/lib64" "$binary"
done
for library in "$stage"/lib/*; do
  strip --strip-unneeded "$library" 2>/dev/null || true
  patchelf --set-rpath "\$ORIGIN" "$library"
done

commit="$(git rev-parse HEAD)$(git diff --quiet HEAD 2>/dev/null || echo '+uncommitted')"
{
  echo "strata GPU kit"
  echo "commit: $commit"
  echo "built:  $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "cuda:   $("${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" --version | grep -o 'release [0-9.]*')"
  echo "archs:  $(grep -o 'CUDA_ARCHS = \[[^]]*\]' third_party/cuda.bzl)"
  echo "files:"
  (cd "$stage" && find bin lib -type f -printf '  %p %s\n' | sort)
} > "$stage/MANIFEST.txt"

rm -rf "$KIT"
mkdir -p "$KIT"
cp "$stage/MANIFEST.txt" "$KIT/MANIFEST.txt"
tar -C "$stage" -cJf "$KIT/kit.tar.xz" bin lib MANIFEST.txt
kit_bytes=$(du -sb "$KIT" | cut -f1)
echo "gpu_kit: $KIT: $(du -sh "$KIT" | cut -f1) ($(ls "$stage/bin" | wc -l) binaries, $(ls "$stage/lib" | wc -l) libraries; $(du -sh "$stage" | cut -f1) unpacked)"
if [ "$kit_bytes" -gt "$MAX_KIT_BYTES" ]; then
  echo "gpu_kit: FAIL: the kit is $kit_bytes bytes, over the 48 MiB limit"
  exit 1
fi

[ -n "$prove_root" ] || exit 0

# The proof: a minimal Debian with none of the development packages, the kit unpacked
# into it, and this machine's CUDA runtime libraries standing in for the GPU machine's.
echo "gpu_kit: proving the kit in $prove_root"
[ -x "$prove_root/bin/bash" ] || {
  echo "gpu_kit: $prove_root is not a Debian root (make one with: debootstrap --variant=minbase bookworm $prove_root)"
  exit 1
}
for package in libabsl20220623 libdnnl2 libspdlog1.10 libopenmpi3 libgtest-dev; do
  if chroot "$prove_root" dpkg-query -W "$package" >/dev/null 2>&1; then
    echo "gpu_kit: FAIL: $prove_root has $package installed: not a bare machine"
    exit 1
  fi
done
rm -rf "$prove_root/kit" "$prove_root/toolkit"
mkdir -p "$prove_root/kit" "$prove_root/toolkit"
tar -C "$prove_root/kit" -xJf "$KIT/kit.tar.xz"
cp -L "$CUDA_LIB"/libcublas.so.13 "$CUDA_LIB"/libcublasLt.so.13 "$prove_root/toolkit/"
# The loader finds $ORIGIN through /proc/self/exe: a real machine has /proc.
mountpoint -q "$prove_root/proc" || mount -t proc proc "$prove_root/proc"
trap 'umount "$prove_root/proc" 2>/dev/null; rm -rf "$stage"' EXIT
failed=0
for binary in "$prove_root"/kit/bin/*; do
  name="$(basename "$binary")"
  if [ "$name" = strata ]; then
    # A short CPU training run: the kit's libraries (oneDNN, MPI, ...) load and work.
    command=(/kit/bin/strata train --set model.preset=tiny --set train.steps=3
             --set train.eval_every=0)
    expect="step     3/3"
  else
    command=("/kit/bin/$name")
    expect=""
  fi
  status=0
  output="$(chroot "$prove_root" env LD_LIBRARY_PATH=/toolkit "${command[@]}" 2>&1)" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "gpu_kit: FAIL: $name exited $status in $prove_root:"
    echo "$output" | tail -15
    failed=1
  elif [ -n "$expect" ] && ! grep -q "$expect" <<<"$output"; then
    echo "gpu_kit: FAIL: $name did not train in $prove_root"
    failed=1
  elif [ -z "$expect" ] && grep -q "no usable GPU" <<<"$output"; then
    echo "gpu_kit: $name starts and skips: $(grep -m1 -o 'no usable GPU[^"]*' <<<"$output" | cut -c1-100)"
  elif [ -z "$expect" ]; then
    echo "gpu_kit: $name runs ($(grep -cE '^\[ +(OK|SKIPPED) +\] [A-Za-z_]+\.[A-Za-z_]+ \(' <<<"$output") tests, no GPU needed)"
  else
    echo "gpu_kit: $name trains on the CPU"
  fi
done
rm -rf "$prove_root/kit" "$prove_root/toolkit"
[ "$failed" -eq 0 ] && echo "gpu_kit: every binary of the kit starts in $prove_root"
exit "$failed"
