#!/usr/bin/env python3
"""Checks strata's CUDA kernel launches (docs/simgpu.md), as g++ under --config=simgpu cannot.

1. Every launch goes through device/cuda/launch.h: no `<<<` in any other C++/CUDA source.
2. `__launch_bounds__(N)` holds: g++ cannot read the attribute back, so simgpu's executor
   cannot enforce it at run time. Each kernel declared with a bound is launched only with
   that bound's own expression as its block size, directly
   (`Launch<&Kernel<S>>(grid, N, ...)`) or through a helper of the same file that launches
   its kernel template argument with the same expression (`Launch<kKernel>(grid, N, ...)`).
Prints one line per problem and exits 1 if any. Usage: tools/check_launches.py [ROOT]
"""
import os
import re
import sys

SOURCES = (".cu", ".cuh", ".cc", ".h")
LAUNCH_HEADER = os.path.join("device", "cuda", "launch.h")
SKIP_DIRS = {"bazel-bin", "bazel-out", "bazel-testlogs", "third_party", "fuzz", "simgpu"}

BOUND = re.compile(r"__launch_bounds__\(\s*([^,()]+?)\s*(?:,[^()]*)?\)\s*(\w+)\s*\(")
# A direct launch: Launch<&Name<...>>(grid, block, ...) or a helper's Helper<&Name<...>>(
DIRECT = re.compile(r"(\w+)<&(\w+)(?:<[^<>]*>)?>\(")
# A helper's own launch of its template argument: Launch<kKernel>(grid, block, ...)
HELPER_LAUNCH = re.compile(r"Launch<(k\w+)>\(")


def split_args(text, start):
    """The top-level comma-separated arguments of the call whose '(' is at text[start-1]."""
    depth, args, current = 0, [], []
    i = start
    while i < len(text):
        c = text[i]
        if c in "([{<" and not (c == "<" and text[i - 1] == " " and text[i + 1] == " "):
            depth += 1
        elif c in ")]}>" and not (c == ">" and text[i - 1] == " " and text[i + 1] == " "):
            if depth == 0:
                args.append("".join(current).strip())
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(c)
        i += 1
    return args


def helper_blocks(text):
    """Function templates of the file that launch their kernel template argument: name -> block."""
    helpers = {}
    for match in HELPER_LAUNCH.finditer(text):
        args = split_args(text, match.end())
        header = text[:match.start()]
        definition = list(re.finditer(r"template <auto (k\w+)[^>]*>\s*\w+\s+(\w+)\(", header))
        if definition and len(args) >= 2 and definition[-1].group(1) == match.group(1):
            helpers[definition[-1].group(2)] = args[1]
    return helpers


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    os.chdir(root)
    problems = 0
    files = 0
    bounded = 0
    for folder, dirs, names in os.walk("."):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith((".", "bazel-")))
        for name in sorted(names):
            if not name.endswith(SOURCES):
                continue
            path = os.path.normpath(os.path.join(folder, name))
            text = open(path, encoding="utf-8", errors="replace").read()
            files += 1
            if path != LAUNCH_HEADER:
                for number, line in enumerate(text.splitlines(), 1):
                    code = line.split("//")[0]
                    if "<<<" in code:
                        print(f"{path}:{number}: a kernel launched with <<<>>>; use "
                              f"strata::cuda::Launch (device/cuda/launch.h)")
                        problems += 1
            if not name.endswith((".cu", ".cuh")):
                continue
            helpers = helper_blocks(text)
            for bound in BOUND.finditer(text):
                limit, kernel = bound.group(1), bound.group(2)
                bounded += 1
                launches = 0
                for launch in DIRECT.finditer(text):
                    via, target = launch.group(1), launch.group(2)
                    if target != kernel:
                        continue
                    launches += 1
                    number = text.count("\n", 0, launch.start()) + 1
                    if via == "Launch":
                        args = split_args(text, launch.end())
                        block = args[1] if len(args) >= 2 else "?"
                    elif via in helpers:
                        block = helpers[via]
                    else:
                        print(f"{path}:{number}: {kernel} (__launch_bounds__({limit})) is "
                              f"launched through {via}, which does not launch its kernel "
                              f"argument with a visible block size")
                        problems += 1
                        continue
                    if block != limit:
                        print(f"{path}:{number}: {kernel} is declared __launch_bounds__({limit})"
                              f" but launched with a block of {block}")
                        problems += 1
                if launches == 0:
                    print(f"{path}: {kernel} (__launch_bounds__({limit})) has no launch in "
                          f"its file to check")
                    problems += 1
    print(f"check_launches: {files} files, {bounded} kernels with launch bounds, "
          f"{problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
