// The rules a model's shape must follow beyond each key's own range (config/option_keys.cc):
// how heads, channels and head sizes fit together, what each family allows (GPT-2 has no
// grouped-query attention, rotary embedding or q/k norms; a LLaMA head is even for its
// rotation), the rotary scaling's fields, the padded vocabulary. Here, with the families,
// so that a new family states its rules where it lives; the option checks report them with
// every other problem.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/options.h"

namespace strata {

// Every problem of `model` (resolved or not: 0 = default fields allowed), one line each
// naming the key, the value and what is expected. Empty: the shape can be built.
std::vector<std::string> ModelShapeProblems(const ModelOptions& model);

}  // namespace strata
