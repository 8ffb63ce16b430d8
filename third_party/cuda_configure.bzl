"""Detects the CUDA toolkit and NCCL and exposes them as the repository @local_cuda.

Where the toolkit is complete (bin/nvcc, include/cuda_runtime.h and lib64/libcudart.so under
CUDA_PATH, else /usr/local/cuda) and STRATA_NO_CUDA is unset or empty, @local_cuda links
the toolkit's include and lib64 folders and its defs.bzl says HAS_CUDA = True. Elsewhere
every target below exists but is empty, HAS_CUDA = False and CUDA_REASON says why, so a
machine without the toolkit builds the CPU parts.

Targets of @local_cuda (all public):
  :cuda          the toolkit headers + the CUDA runtime (-lcudart); what .cc files that call
                 cudart and every cuda_library need.
  :cuda_headers  the headers only (no link options).
  :cublas        cuBLAS and cuBLASLt.
  :nccl          NCCL's headers (the library is dlopen'd at run time).
Link options carry an rpath to the toolkit's lib64, so binaries and tests run without
LD_LIBRARY_PATH wherever the toolkit sits at the same path.

simgpu (STRATA_SIMGPU set, as `--config=simgpu` does; docs/simgpu.md): the toolkit's headers
are required (the rule fails, naming what is missing, rather than build a CPU-only strata
that would skip every GPU test), nvcc and the GPU libraries are not. HAS_CUDA = True and
SIMGPU = True; :cuda and :cublas link strata's CPU doubles (//simgpu:cudart, //simgpu:cublas)
instead of libcudart and libcublas, and cuda_library compiles .cu files with g++ against
simgpu's SIMT executor (//third_party:cuda.bzl).

Re-running: the rule depends on CUDA_PATH, STRATA_NO_CUDA and STRATA_SIMGPU (`environ`), so changing
either (in the client environment, or through --action_env / --repo_env as
`--config=nocuda` does) re-runs it; `local = True` re-runs it when the Bazel server
restarts, which picks up a toolkit installed or removed since.
"""

_HEADERS_GLOB = ["include/**"]

def _empty_build(reason):
    return """# No usable CUDA toolkit: {reason}
# Every target exists and is empty, so BUILD files may name them unconditionally.
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cuda")
cc_library(name = "cublas")
cc_library(name = "nccl")
""".format(reason = reason)

def _cuda_build(root):
    return """# CUDA toolkit at {root} (found by //third_party:cuda_configure.bzl).
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda_headers",
    # Every header: the C++ rules reject an #include of an undeclared file.
    hdrs = glob({globs}, allow_empty = True),
    includes = ["include", "include/cccl"],
)
cc_library(
    name = "cuda",
    deps = [":cuda_headers"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcudart", "-ldl", "-lpthread",
                "-lrt"],
)
cc_library(
    name = "cublas",
    deps = [":cuda"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcublasLt", "-lcublas"],
)
# NCCL's headers only: the library is loaded at run time (collectives/nccl_library.cc),
# and only where more than one GPU rank needs it.
cc_library(
    name = "nccl",
    deps = [":cuda_headers"],
    linkopts = ["-ldl"],
)
""".format(root = root, globs = repr(_HEADERS_GLOB))

def _simgpu_build():
    return """# simgpu: the toolkit's headers, strata's CPU doubles for its libraries (docs/simgpu.md).
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda_headers",
    hdrs = glob({globs}, allow_empty = True),
    includes = ["include", "include/cccl"],
)
cc_library(
    name = "cuda",
    deps = [":cuda_headers", "@//simgpu:cudart"],
)
cc_library(
    name = "cublas",
    deps = [":cuda", "@//simgpu:cublas"],
)
cc_library(
    name = "nccl",
    deps = [":cuda_headers"],
    linkopts = ["-ldl"],
)
""".format(globs = repr(_HEADERS_GLOB))

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "") or "/usr/local/cuda"
    root = root.rstrip("/") or "/"
    nvcc = ctx.path(root + "/bin/nvcc")
    if ctx.os.environ.get("STRATA_SIMGPU", "") != "":
        for header in ["cuda_runtime.h", "cuda.h", "cublas_v2.h", "nccl.h"]:
            if not ctx.path(root + "/include/" + header).exists:
                fail("--config=simgpu needs the CUDA toolkit's headers (and NCCL's): no " +
                     "include/%s under %s (set CUDA_PATH to the toolkit)" % (header, root))
        ctx.symlink(root + "/include", "include")
        ctx.file("BUILD", _simgpu_build())
        ctx.file("defs.bzl", """# Written by //third_party:cuda_configure.bzl; do not edit.
HAS_CUDA = True
SIMGPU = True
CUDA_ROOT = {root}
NVCC = ""
CUDA_REASON = "simgpu: the CUDA backend on strata's CPU doubles (--config=simgpu)"
""".format(root = repr(root)))
        return
    reason = ""
    if ctx.os.environ.get("STRATA_NO_CUDA", "") != "":
        reason = "STRATA_NO_CUDA is set (--config=nocuda)"
    elif not nvcc.exists:
        reason = "no nvcc at %s (set CUDA_PATH to the toolkit)" % nvcc
    elif not ctx.path(root + "/include/cuda_runtime.h").exists:
        reason = "no include/cuda_runtime.h under %s" % root
    elif not ctx.path(root + "/lib64/libcudart.so").exists:
        reason = "no lib64/libcudart.so under %s" % root
    has_cuda = reason == ""
    if has_cuda:
        ctx.symlink(root + "/include", "include")
        ctx.symlink(root + "/lib64", "lib64")
        ctx.file("BUILD", _cuda_build(root))
    else:
        ctx.file("BUILD", _empty_build(reason))
    ctx.file("defs.bzl", """# Written by //third_party:cuda_configure.bzl; do not edit.
HAS_CUDA = {has_cuda}
SIMGPU = False
CUDA_ROOT = {root}
NVCC = {nvcc}
CUDA_REASON = {reason}
""".format(
        has_cuda = has_cuda,
        root = repr(root if has_cuda else ""),
        nvcc = repr(str(nvcc) if has_cuda else ""),
        reason = repr(reason or "found the toolkit at " + root),
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "STRATA_NO_CUDA", "STRATA_SIMGPU"],
    local = True,
)
