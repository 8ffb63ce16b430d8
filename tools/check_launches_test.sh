#!/usr/bin/env bash
# tools/check_launches.py passes on the tree and fails on each kind of problem it exists
# for: a `<<<` launch outside device/cuda/launch.h, a bounded kernel launched with another
# block size directly and through a helper, and a bounded kernel whose launch it cannot see.
set -uo pipefail
# Under Bazel the data file is a link into the checkout: the checkout is its grandparent.
check="$(readlink -f tools/check_launches.py)"
root="$(dirname "$(dirname "$check")")"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out="$(python3 "$check" "$root")" || fail "the tree has problems: $out"
echo "$out" | grep -q "kernels with launch bounds, 0 problems" || fail "unexpected: $out"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels/cuda" "$tmp/device/cuda"
cat > "$tmp/kernels/cuda/good.cu" <<'CU'
template <typename S>
__global__ void __launch_bounds__(kThreads) Good(S* x) {}
template <auto kKernel, typename... Args>
Status Helper(const char* name, dim3 grid, cudaStream_t stream, Args... args) {
  ::strata::cuda::Launch<kKernel>(grid, kThreads, 0, stream, args...);
}
void Run() {
  ::strata::cuda::Launch<&Good<S>>(GridStrideBlocks(n, kThreads), kThreads, 0, stream, x);
  Helper<&Good<S>>("Good", grid, stream, x);
}
CU
out="$(python3 "$check" "$tmp")" || fail "a correct file is refused: $out"

sed 's/kThreads, 0, stream, x);/128, 0, stream, x);/' "$tmp/kernels/cuda/good.cu" > "$tmp/kernels/cuda/bad.cu"
out="$(python3 "$check" "$tmp")"
[ $? -eq 1 ] && echo "$out" | grep -q "bad.cu:8: Good is declared __launch_bounds__(kThreads) but launched with a block of 128" \
  || fail "a direct launch with another block passes: $out"
rm "$tmp/kernels/cuda/bad.cu"

sed 's/Launch<kKernel>(grid, kThreads/Launch<kKernel>(grid, 2 * kThreads/' "$tmp/kernels/cuda/good.cu" > "$tmp/kernels/cuda/bad.cu"
out="$(python3 "$check" "$tmp")"
[ $? -eq 1 ] && echo "$out" | grep -q "bad.cu:9: Good is declared __launch_bounds__(kThreads) but launched with a block of 2 \* kThreads" \
  || fail "a helper's launch with another block passes: $out"
rm "$tmp/kernels/cuda/bad.cu"

printf '__global__ void __launch_bounds__(256) Lonely(float* x) {}\n' > "$tmp/kernels/cuda/bad.cu"
out="$(python3 "$check" "$tmp")"
[ $? -eq 1 ] && echo "$out" | grep -q "Lonely (__launch_bounds__(256)) has no launch" \
  || fail "a bounded kernel without a visible launch passes: $out"
rm "$tmp/kernels/cuda/bad.cu"

printf 'void F() {\n  Kernel<<<1, 32>>>(x);\n}\n' > "$tmp/kernels/cuda/chevron.cc"
out="$(python3 "$check" "$tmp")"
[ $? -eq 1 ] && echo "$out" | grep -q "chevron.cc:2: a kernel launched with <<<>>>" \
  || fail "a <<< launch passes: $out"

[ "$failures" -eq 0 ] && echo "check_launches_test: all cases passed"
exit $((failures > 0))
