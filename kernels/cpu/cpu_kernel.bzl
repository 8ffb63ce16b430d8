"""cpu_kernel: a model kernel of kernels/cpu as its library and its test.

A kernel `name` is name.h and name.cc (plus any further sources of the same kernel,
`srcs`), all compiled with CPU_KERNEL_COPTS, and name_test.cc, which checks the fast
version against the reference with the shared scaffolding of :kernel_test_util. Every
kernel depends on //core:dtype and OpenMP; `deps` adds the kernel's own dependencies.
"""

# Each kernel is a plain reference (the specification) and a fast OpenMP + vectorised
# version, compiled for AVX-512 / AVX2 / baseline with run-time choice (target_clones in
# the sources; never -march=native). -fopenmp: a cc_library's copts do not reach the
# targets that depend on it, so every target with `#pragma omp` compiles with it itself.
# -fno-math-errno lets sqrtf vectorise; -mprefer-vector-width=512 only matters inside the
# AVX-512 clones.
CPU_KERNEL_COPTS = [
    "-fopenmp",
    "-O3",
    "-fno-math-errno",
    "-mprefer-vector-width=512",
]

def cpu_kernel(name, srcs = [], deps = [], copts = [], visibility = None):
    """Declares cc_library `name` and its cc_test `name_test` (size small).

    Args:
      name: the kernel; its files are name.h, name.cc and name_test.cc.
      srcs: more .cc files of the kernel beyond name.cc, compiled with the same copts.
      deps: the library's dependencies besides //core:dtype and OpenMP.
      copts: the library's compiler flags beyond CPU_KERNEL_COPTS (e.g. -ffp-contract=off
        where the fast version must give the reference's bits).
      visibility: the library's dependents outside this package (default: private).
    """
    native.cc_library(
        name = name,
        visibility = visibility,
        srcs = [name + ".cc"] + srcs,
        hdrs = [name + ".h"],
        copts = CPU_KERNEL_COPTS + copts,
        deps = deps + [
            "//core:dtype",
            "@system//:openmp",
        ],
    )
    native.cc_test(
        name = name + "_test",
        size = "small",
        srcs = [name + "_test.cc"],
        deps = [
            ":" + name,
            ":kernel_test_util",
            "@system//:gtest_main",
            "@system//:openmp",
        ],
    )
