"""cuda_library: compiles .cu sources with nvcc into objects wrapped in a cc_library.

No rules_cuda offline, so this small rule runs nvcc once per source with the include paths
and defines of its C++ deps. Without the toolkit (HAS_CUDA False) the library is empty and
carries no CUDA symbols; callers select on //third_party:has_cuda.
"""

load("@local_cuda//:defs.bzl", "HAS_CUDA", "NVCC")

CUDA_ARCHS = ["80", "90"]

def _cuda_objects_impl(ctx):
    cc = ctx.attr.deps
    headers = []
    includes = []
    quote_includes = []
    system_includes = []
    defines = []
    for d in cc:
        info = d[CcInfo].compilation_context
        headers.append(info.headers)
        includes += info.includes.to_list()
        quote_includes += info.quote_includes.to_list()
        system_includes += info.system_includes.to_list()
        defines += info.defines.to_list()
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(".cu")]
        pic = ctx.actions.declare_file("_cuda_objs/%s/%s.pic.o" % (ctx.label.name, stem))
        args = ctx.actions.args()
        args.add("-c", src)
        args.add("-o", pic)
        args.add_all(["-std=c++17", "-O3", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
                      "-I", ".", "-I", ctx.genfiles_dir.path, "-lineinfo"])
        for arch in CUDA_ARCHS:
            args.add("-gencode=arch=compute_{a},code=sm_{a}".format(a = arch))
        for i in includes + quote_includes:
            args.add("-I", i)
        for i in system_includes:
            args.add("-isystem", i)
        for d in defines:
            args.add("-D" + d)
        args.add_all(ctx.attr.copts)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src] + ctx.files.hdrs, transitive = headers),
            outputs = [pic],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(pic)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu srcs are compiled by nvcc (empty where CUDA is absent)."""
    if HAS_CUDA:
        _cuda_objects(name = name + "_cu", srcs = srcs, hdrs = hdrs,
                      deps = deps + ["@local_cuda//:cuda"], copts = copts)
        native.cc_library(name = name, srcs = [":" + name + "_cu"], hdrs = hdrs,
                          deps = deps + ["@local_cuda//:cuda"], alwayslink = True, **kwargs)
    else:
        native.cc_library(name = name, hdrs = hdrs, deps = deps, **kwargs)

def if_cuda(if_true, if_false = []):
    """Picks a value by whether the CUDA toolkit was found at configure time."""
    return if_true if HAS_CUDA else if_false
