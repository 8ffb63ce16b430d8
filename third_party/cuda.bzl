"""cuda_library: compiles .cu sources with nvcc into objects wrapped in a cc_library.

No rules_cuda offline, so this small rule runs nvcc once per .cu with the include paths and
defines of its C++ deps and the C++ toolchain's compiler as nvcc's host compiler, and hands
the objects to a cc_library, which links them like any C++ object.

- Objects are always position-independent (-Xcompiler -fPIC) and named `.pic.o`. PIC code
  links into executables as well as shared libraries, and Bazel uses a `.pic.o` given in a
  cc_library's srcs for both kinds of link: the shared libraries a cc_test links
  dynamically in fastbuild, and the static archives of `-c opt` or `linkstatic` binaries.
  One compile per source serves every link.
- Objects go to `_cuda_objs/<name>/<path of the .cu in its package>.pic.o`, so two sources
  with the same file name in different folders, or a .cc and a .cu with the same stem, do
  not collide with each other or with the cc_library's own `_objs/`.
- Device code is compiled for CUDA_ARCHS only (SASS for sm_80 and sm_90, no PTX): each
  extra architecture costs a full device compile of every .cu. No -rdc: a kernel cannot
  call a __device__ function defined in another .cu (there is no device-link step).
- `alwayslink` is off by default: a .cu object is linked when its host-side launcher is
  referenced, which is how our kernels are reached. Pass alwayslink = True for a .cu that
  only registers itself through a static initializer.
- Under --config=simgpu (SIMGPU True) the same rule compiles each .cu with the C++
  toolchain's g++ instead (`-x c++`, simgpu/simt.h first; _SIMGPU_COPTS) against
  //simgpu:simt_headers, and the library links //simgpu:simt (no headers, so dependants'
  compiles are the normal build's); a target's nvcc `copts` are not passed to g++.
- Where CUDA is absent (HAS_CUDA False: no toolkit, or --config=nocuda) the library has
  the headers and deps but no objects, and carries no CUDA symbols.

Gating CUDA code in BUILD files: `if_cuda(a, b)` is `a` where the toolkit was found and
`b` elsewhere, decided at load time, so it may add or drop whole targets, srcs, deps and
tags. For select() there is the config_setting `//third_party:has_cuda`, which matches
exactly when HAS_CUDA is True.
"""

load(
    "@local_cuda//:defs.bzl",
    _CUDA_REASON = "CUDA_REASON",
    _HAS_CUDA = "HAS_CUDA",
    _NVCC = "NVCC",
    _SIMGPU = "SIMGPU",
)

HAS_CUDA = _HAS_CUDA
SIMGPU = _SIMGPU
CUDA_REASON = _CUDA_REASON

# simgpu (--config=simgpu): .cu files compiled by the C++ toolchain's g++ as C++, with
# simgpu/simt.h (the CUDA language on the SIMT executor) included first. No fused
# multiply-adds, so a kernel's float arithmetic is what its source says, as nvcc's __f*_rn
# intrinsics and the CPU references compute it.
_SIMGPU_COPTS = [
    "-std=c++17",
    "-O2",
    "-g1",
    "-fPIC",
    "-ffp-contract=off",
    "-Wall",
    "-Wno-sign-compare",
    "-Wno-unknown-pragmas",
    "-DSTRATA_SIMGPU",
    "-include",
    "simgpu/simt.h",
]

# Compute capabilities compiled to SASS: A100 (sm_80; also runs on sm_86/sm_89) and H100/H200
# (sm_90).
CUDA_ARCHS = ["80", "90"]

_CUDA_SRC_EXTENSIONS = [".cu"]
_CUDA_HDR_EXTENSIONS = [".cuh", ".h", ".hpp", ".inc"]

def _object_path(ctx, src):
    # The source's path inside its package, without ".cu": unique per target.
    package = ctx.label.package
    path = src.short_path
    if package and path.startswith(package + "/"):
        path = path[len(package) + 1:]
    return "_cuda_objs/%s/%s.pic.o" % (ctx.label.name, path[:-len(".cu")])

def _cuda_objects_impl(ctx):
    cc_toolchain = ctx.attr._cc_toolchain[cc_common.CcToolchainInfo]
    contexts = [d[CcInfo].compilation_context for d in ctx.attr.deps]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in contexts])
    # nvcc has no -iquote: quote includes (the workspace root, the bin folder, external
    # repositories) become -I, which finds the same files.
    quote_includes = depset(
        [".", ctx.bin_dir.path],
        transitive = [c.quote_includes for c in contexts],
    )
    own_includes = []
    for include in ctx.attr.includes:
        path = ctx.label.package + "/" + include if ctx.label.package else include
        own_includes += [path, ctx.bin_dir.path + "/" + path]
    includes = depset(own_includes, transitive = [c.includes for c in contexts])
    system_includes = depset(transitive = [c.system_includes for c in contexts])
    defines = depset(ctx.attr.defines, transitive = [c.defines for c in contexts])

    outs = []
    for src in ctx.files.srcs:
        if not src.basename.endswith(".cu"):
            continue
        obj = ctx.actions.declare_file(_object_path(ctx, src))
        args = ctx.actions.args()
        if SIMGPU:
            args.add_all(["-x", "c++", "-c", src.path, "-o", obj.path])
            # The build's own --copt/--cxxopt first (an ASan build instruments the kernels
            # too: a static __shared__ overrun is then found), simgpu's after them.
            args.add_all(ctx.fragments.cpp.copts)
            args.add_all(ctx.fragments.cpp.cxxopts)
            args.add_all(_SIMGPU_COPTS)
        else:
            args.add("-ccbin", cc_toolchain.compiler_executable)
            args.add_all(["-x", "cu", "-c", src.path, "-o", obj.path])
            args.add_all(["-std=c++17", "-O3", "-lineinfo", "--expt-relaxed-constexpr"])
            args.add_all(["-Xcompiler", "-fPIC"])
            for arch in CUDA_ARCHS:
                args.add("-gencode=arch=compute_{a},code=sm_{a}".format(a = arch))
        args.add_all(quote_includes, before_each = "-I")
        args.add_all(includes, before_each = "-I")
        args.add_all(system_includes, before_each = "-isystem")
        args.add_all(defines, format_each = "-D%s")
        if not SIMGPU:
            args.add_all(ctx.attr.copts)
        ctx.actions.run(
            executable = cc_toolchain.compiler_executable if SIMGPU else _NVCC,
            arguments = [args],
            inputs = depset(
                [src] + [f for f in ctx.files.srcs if not f.basename.endswith(".cu")],
                transitive = [headers, cc_toolchain.all_files],
            ),
            outputs = [obj],
            mnemonic = "SimgpuCompile" if SIMGPU else "Nvcc",
            progress_message = ("g++ (simgpu) %s" if SIMGPU else "nvcc %s") % src.short_path,
            # nvcc and its host compiler run in the client's environment (PATH, TMPDIR),
            # as the C++ actions do with --incompatible_strict_action_env=false.
            use_default_shell_env = True,
        )
        outs.append(obj)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = _CUDA_SRC_EXTENSIONS + _CUDA_HDR_EXTENSIONS),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "defines": attr.string_list(),
        "includes": attr.string_list(),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
)

def cuda_library(
        name,
        srcs = [],
        hdrs = [],
        deps = [],
        copts = [],
        defines = [],
        includes = [],
        alwayslink = False,
        **kwargs):
    """A cc_library whose .cu srcs are compiled by nvcc (no objects where CUDA is absent).

    Args:
      name: the cc_library's name; the nvcc objects are the target name + "_cu".
      srcs: .cu files, plus private headers (.cuh, .h) they include.
      hdrs: public headers, as for cc_library.
      deps: C++ deps; their headers, include paths and defines reach nvcc too.
        @local_cuda//:cuda (headers + cudart) is always added.
      copts: extra nvcc options (not passed to the C++ compiler).
      defines: as for cc_library (reach nvcc and every dependant).
      includes: as for cc_library.
      alwayslink: as for cc_library; see the file comment.
      **kwargs: passed to the cc_library (visibility, testonly, tags, ...).
    """
    if HAS_CUDA:
        _cuda_objects(
            name = name + "_cu",
            srcs = srcs,
            hdrs = hdrs,
            deps = deps + ["@local_cuda//:cuda"] + (["@//simgpu:simt_headers"] if SIMGPU else []),
            copts = copts,
            defines = defines,
            includes = includes,
            testonly = kwargs.get("testonly", False),
            tags = kwargs.get("tags", []),
            visibility = ["//visibility:private"],
        )
        native.cc_library(
            name = name,
            srcs = [":" + name + "_cu"],
            hdrs = hdrs,
            deps = deps + ["@local_cuda//:cuda"] + (["@//simgpu:simt"] if SIMGPU else []),
            defines = defines,
            includes = includes,
            alwayslink = alwayslink,
            **kwargs
        )
    else:
        native.cc_library(
            name = name,
            hdrs = hdrs,
            deps = deps,
            defines = defines,
            includes = includes,
            alwayslink = alwayslink,
            **kwargs
        )

def if_simgpu(if_true, if_false = []):
    """`if_true` under --config=simgpu (the CUDA backend on the CPU doubles), else `if_false`."""
    return if_true if SIMGPU else if_false

def if_cuda(if_true, if_false = []):
    """`if_true` where the CUDA toolkit was found (HAS_CUDA), else `if_false`.

    Decided when BUILD files load, so it can gate whole targets as well as srcs and deps.
    """
    return if_true if HAS_CUDA else if_false
