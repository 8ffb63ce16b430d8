// Turns a JSON config file plus `--set section.key=value` overrides into a validated Options.
// One key table (options_parse.cc) drives parsing, DescribeKeys and FormatResolved, so every
// field of options.h is parsed, documented and logged the same way, with defaults read from
// Options{} itself (docs cannot drift from code). Order of application: defaults, then
// model.preset (from the file or a --set, a --set winning), then the file's other keys, then
// each --set in order. Unknown sections/keys are errors, never ignored; every problem found
// (file, --set syntax, types, ranges, cross-field checks) is reported at once in a single
// InvalidArgument status, one line per problem, each naming the key, the value and what is
// expected. Nothing here throws, exits or asserts. Thread-safety: pure functions; safe to
// call from any thread.
#pragma once

#include <string>
#include <vector>

#include "core/options.h"
#include "core/status.h"

namespace strata {

// Parses `config_json_path` (may be empty: no file) nested by section, e.g.
// {"model": {"preset": "tiny"}, "train": {"steps": 10}}, then applies `sets`, each
// "section.key=value" with the value in --set syntax (integers, numbers, "fp32"/"bf16",
// sizes like "2GiB" for device.memory_limit, strings as-is). Returns the merged options
// after ValidateOptions, or one InvalidArgument status listing every problem.
StatusOr<Options> ParseOptions(const std::string& config_json_path,
                               const std::vector<std::string>& sets);

// Range and cross-field checks on already-merged options (steps >= 1, seq_len <=
// model.max_seq_len, channels % heads == 0, backend and ZeRO stage available in this
// build, ...). OK, or InvalidArgument with one line per problem. ParseOptions runs it;
// call it directly for options built in code.
Status ValidateOptions(const Options& options);

// train.trace_steps: "A:B", steps A through B (1-based, as the progress lines count),
// 1 <= A <= B; InvalidArgument naming the key and the text otherwise.
StatusOr<std::pair<int, int>> ParseStepRange(const std::string& text);

// Every config key, "section.key", in table order (model, data, train, device, zero).
std::vector<std::string> ConfigKeys();

// The keys ranks may set differently (a machine's own paths and limits), in table order.
std::vector<std::string> RankLocalKeys();

// The names of the model presets, e.g. {"tiny", "small", "gpt2-124m"}.
std::vector<std::string> ModelPresetNames();

// Human-readable listing of every key: name, type, default (from Options{}) and meaning.
// For `strata train --help-config`.
std::string DescribeKeys();

// The resolved configuration, one "section.key=value" line per key in table order, each a
// valid --set argument: ParseOptions("", lines) reproduces `options` exactly. Log it once.
std::string FormatResolved(const Options& options);

// Every key of `options` as a config file ParseOptions reads back to the same options:
// {"section": {"key": value}}, numbers and booleans typed, sizes and enums as text.
std::string FormatConfigJson(const Options& options);

}  // namespace strata
