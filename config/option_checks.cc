// The checks of merged options; see option_keys.h (CheckOptions) and options_parse.h
// (ValidateOptions). Each key's range is its KeySpec's; the rules across keys are named,
// here; the model's shape rules are models/shape_rules.h's and the placement's
// combinations runtime/placement.h's, listed here with every other problem.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/option_keys.h"
#include "config/options_parse.h"
#include "models/shape_rules.h"
#include "runtime/placement.h"

namespace strata::option_keys {
namespace {

// A numeric key's value, as the checks compare it (sizes exactly, as uint64).
struct Number {
  bool numeric = false;
  double value = 0;
  uint64_t whole = 0;
};

Number NumberOf(const KeySpec& spec, const Options& options) {
  Options& mutable_options = const_cast<Options&>(options);  // accessors only read here
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    return {true, static_cast<double>(*(*field)(mutable_options)), 0};
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    return {true, *(*field)(mutable_options), 0};
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    return {true, *(*field)(mutable_options), 0};
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    const uint64_t whole = *(*field)(mutable_options);
    return {true, static_cast<double>(whole), whole};
  }
  return {};
}

bool Allows(const Range& range, const Number& number) {
  const double v = number.value;
  if (range.has_min && (range.min_open ? v <= range.min : v < range.min)) return false;
  if (range.has_max && (range.max_open ? v >= range.max : v > range.max)) return false;
  if (range.multiple_of != 0 &&
      (number.whole < range.multiple_of || number.whole % range.multiple_of != 0)) {
    return false;
  }
  return true;
}

// A rule that involves several keys, named by what it asks.
struct CrossKeyRule {
  const char* name;
  std::function<void(const Options&, std::vector<std::string>*)> check;
};

void Expect(std::vector<std::string>* problems, bool ok, const char* key, const std::string& got,
            const std::string& expected) {
  if (!ok) problems->push_back(absl::StrCat(key, ": got ", got, ", expected ", expected));
}

// Every rule across keys, in one place (the placement's combinations are
// runtime/placement.h's, the model's shape models/shape_rules.h's).
const std::vector<CrossKeyRule>& CrossKeyRules() {
  static const auto* rules = new std::vector<CrossKeyRule>{
      {"a sequence fits the model's positions",
       [](const Options& o, std::vector<std::string>* problems) {
         if (o.train.seq_len < 1) return;
         Expect(problems, o.train.seq_len <= o.model.max_seq_len, "train.seq_len",
                NumberText(o.train.seq_len),
                absl::StrCat("<= model.max_seq_len (", o.model.max_seq_len, ")"));
       }},
      {"a sequence fits a sliding window",
       [](const Options& o, std::vector<std::string>* problems) {
         if (o.model.sliding_window <= 0) return;
         Expect(problems, o.train.seq_len <= o.model.sliding_window, "train.seq_len",
                NumberText(o.train.seq_len),
                absl::StrCat("<= model.sliding_window (", o.model.sliding_window,
                             "): strata's attention is full causal, the same as the model's "
                             "sliding window only for sequences within it"));
       }},
      {"checkpoints need a directory",
       [](const Options& o, std::vector<std::string>* problems) {
         if (o.train.checkpoint_every > 0 && o.train.checkpoint_dir.empty()) {
           problems->push_back(
               "train.checkpoint_every is set but train.checkpoint_dir is empty: set "
               "train.checkpoint_dir to a directory");
         }
       }},
      {"the placement can run (runtime/placement.h)",
       [](const Options& o, std::vector<std::string>* problems) {
         for (std::string& problem : PlacementProblems(o)) problems->push_back(std::move(problem));
       }},
  };
  return *rules;
}

}  // namespace

void CheckOptions(const Options& options, std::vector<std::string>* problems) {
  // Each key's own check.
  if (FindPreset(options.model.preset) == nullptr) {
    Expect(problems, false, "model.preset", absl::StrCat("'", options.model.preset, "'"),
           absl::StrCat("one of ", PresetList()));
  }
  for (const KeySpec& spec : Keys()) {
    if (spec.range.empty()) continue;
    const Number number = NumberOf(spec, options);
    if (number.numeric && !Allows(spec.range, number)) {
      Expect(problems, false, spec.name, ValueText(spec, options), ExpectedText(spec.range));
    }
  }
  if (StatusOr<std::pair<int, int>> range = ParseStepRange(options.train.trace_steps);
      !range.ok()) {
    problems->push_back(std::string(range.status().message()));
  }
  // The model's shape, then the rules across keys.
  for (std::string& problem : ModelShapeProblems(options.model)) {
    problems->push_back(std::move(problem));
  }
  for (const CrossKeyRule& rule : CrossKeyRules()) rule.check(options, problems);
}

}  // namespace strata::option_keys
