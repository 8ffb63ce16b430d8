"""Detects the CUDA toolkit and NCCL and exposes them as the repository @local_cuda.

Where nvcc exists (CUDA_PATH, else /usr/local/cuda), @local_cuda links the toolkit's
include and lib64 folders and its defs.bzl says HAS_CUDA = True; elsewhere the repository
is empty and HAS_CUDA = False, so a machine without the toolkit builds the CPU parts.
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    has_cuda = nvcc.exists and ctx.os.environ.get("STRATA_NO_CUDA", "") == ""
    if has_cuda:
        ctx.symlink(root + "/include", "include")
        ctx.symlink(root + "/lib64", "lib64")
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/*.hpp", "include/crt/**", "include/cuda/**",
                 "include/nv/**", "include/cccl/**"], allow_empty = True),
    includes = ["include"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcublasLt", "-lcublas",
                "-lnccl", "-lcudart", "-ldl", "-lpthread", "-lrt"],
)
""".format(root = root))
    else:
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda")
""")
    ctx.file("defs.bzl", "HAS_CUDA = {}\nNVCC = \"{}\"\n".format(has_cuda, str(nvcc) if has_cuda else ""))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "STRATA_NO_CUDA"],
    local = True,
)
