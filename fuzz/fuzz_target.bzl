"""fuzz_target: a libFuzzer target of fuzz/ as its fuzzing binary and its replay test.

A target `name` is name_fuzz.cc (which defines LLVMFuzzerTestOneInput), its seed corpus
name/corpus/ and its crash reproducers name/crashes/ (every crash the fuzzer ever found,
kept after the fix). It declares:
  name_fuzz          the binary. Under --config=fuzz (clang-14, -fsanitize=fuzzer,address,
                     undefined; .bazelrc) libFuzzer's main drives it: tools/fuzz.sh runs it.
                     In the default build it is the replay main (replay_main.cc) over the
                     files and directories it is given. Tagged manual: out of //...
  name_replay_test   the corpus and every reproducer, each run once through the target: in
                     the default build with gcc (part of ./test.sh), under --config=fuzz with
                     libFuzzer's main (which runs file arguments once each) and sanitizers.
"""

def fuzz_target(name, deps = [], size = "small"):
    """Declares cc_binary `name_fuzz` (manual) and cc_test `name_replay_test`.

    Args:
      name: the target; its source is name_fuzz.cc, its inputs name/corpus/ and name/crashes/.
      deps: the parser's libraries (their public headers are all the target includes).
      size: the replay test's size.
    """
    all_deps = deps + [":fuzz_scratch"] + select({
        ":libfuzzer": [],
        "//conditions:default": [":replay_main"],
    })
    native.cc_binary(
        name = name + "_fuzz",
        srcs = [name + "_fuzz.cc"],
        deps = all_deps,
        tags = ["manual"],
    )
    inputs = native.glob([name + "/corpus/*", name + "/crashes/*"])
    native.cc_test(
        name = name + "_replay_test",
        size = size,
        srcs = [name + "_fuzz.cc"],
        deps = all_deps,
        data = inputs,
        args = ["$(rootpath %s)" % input for input in inputs],
    )
