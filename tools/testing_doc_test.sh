#!/usr/bin/env bash
# See tools/BUILD: the testing-page check on a made-up tree (a listed page passes; a test
# target left out, a stale entry, a cpu_kernel's test and a fuzz_target's replay test each
# fail, named), then on this checkout.
set -uo pipefail
script="$(readlink -f tools/check_testing_doc.sh)"
fail() { echo "FAIL: $*"; exit 1; }

fake="$(mktemp -d)"
trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/docs" "$fake/core" "$fake/kernels/cpu" "$fake/fuzz"
cat > "$fake/core/BUILD" <<'BUILD'
cc_test(
    name = "memory_test",
    srcs = ["memory_test.cc"],
)
[sh_test(
    name = "loop_test",
) for x in [1]]
BUILD
cat > "$fake/kernels/cpu/BUILD" <<'BUILD'
cpu_kernel(
    name = "matmul",
)
BUILD
cat > "$fake/fuzz/BUILD" <<'BUILD'
fuzz_target(
    name = "hardware",
)
BUILD
page='- `//core:memory_test`: x
- `//core:loop_test`: y
- `//kernels/cpu:matmul_test`: z
- `//fuzz:hardware_replay_test`: v'
echo "$page" > "$fake/docs/testing.md"
"$script" "$fake" > "$fake/out.txt" || fail "a complete page was refused: $(cat "$fake/out.txt")"
grep -q "all 4 test targets listed" "$fake/out.txt" || fail "not 4 targets: $(cat "$fake/out.txt")"
echo "$page" | grep -v hardware > "$fake/docs/testing.md"
"$script" "$fake" > "$fake/out.txt" && fail "a missing fuzz_target replay test passed"
grep -q "//fuzz:hardware_replay_test is a test target" "$fake/out.txt" || fail "not named: $(cat "$fake/out.txt")"
echo "$page" | grep -v matmul > "$fake/docs/testing.md"
"$script" "$fake" > "$fake/out.txt" && fail "a missing cpu_kernel test passed"
grep -q "//kernels/cpu:matmul_test is a test target" "$fake/out.txt" || fail "not named: $(cat "$fake/out.txt")"
{ echo "$page"; echo '- `//core:gone_test`: w'; } > "$fake/docs/testing.md"
"$script" "$fake" > "$fake/out.txt" && fail "a stale entry passed"
grep -q "lists //core:gone_test, which is no test target" "$fake/out.txt" || fail "not named: $(cat "$fake/out.txt")"

root="$(dirname "$(dirname "$script")")"
"$script" "$root"
