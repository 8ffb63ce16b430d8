// Fuzz target: option text (config/options_parse.h, ParseOptions): a config file and
// `--set section.key=value` arguments. The input is the config file's bytes up to the first
// form feed (\f), then one --set per line; without a form feed the whole input is the
// file, and an input starting with \f has no file. Every key, value syntax (integers,
// floats, sizes, enums, booleans, step ranges) and cross-field check is reachable. A key
// naming a file (model.from=hf:DIR or llmc:FILE, data.path) is only read, and only where
// the path exists.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/options_parse.h"
#include "fuzz/fuzz_scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t form_feed = input.find('\f');
  const std::string_view file = input.substr(0, form_feed);
  std::vector<std::string> sets;
  if (form_feed != std::string_view::npos) {
    std::string_view rest = input.substr(form_feed + 1);
    while (!rest.empty()) {
      const size_t newline = rest.find('\n');
      sets.emplace_back(rest.substr(0, newline));
      if (newline == std::string_view::npos) break;
      rest.remove_prefix(newline + 1);
    }
  }
  std::string path;
  if (!file.empty()) path = strata::fuzz::WriteScratchFile("config.json", file);
  strata::StatusOr<strata::Options> options = strata::ParseOptions(path, sets);
  if (!options.ok()) return 0;
  // What a run logs once and what `plan --emit` writes must parse back to the same options.
  const std::string resolved = strata::FormatResolved(*options);
  (void)strata::FormatConfigJson(*options);
  std::vector<std::string> lines;
  for (size_t begin = 0; begin < resolved.size();) {
    const size_t end = resolved.find('\n', begin);
    lines.push_back(resolved.substr(begin, end - begin));
    begin = end == std::string::npos ? resolved.size() : end + 1;
  }
  strata::StatusOr<strata::Options> again = strata::ParseOptions("", lines);
  if (!again.ok() || strata::FormatResolved(*again) != resolved) __builtin_trap();
  return 0;
}
