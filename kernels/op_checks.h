// Argument checks shared by the Ops backends (kernels/cpu, kernels/cuda): each fails with
// kInvalidArgument naming the op and every offending argument, before anything is enqueued.
// Thread-safety: plain functions.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strata {

// Fails naming the op and every negative size.
inline Status CheckNonNegative(const char* op,
                               std::initializer_list<std::pair<const char*, long>> sizes) {
  std::string problems;
  for (const auto& [name, value] : sizes) {
    if (value < 0) absl::StrAppend(&problems, problems.empty() ? "" : ", ", name, "=", value);
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": negative size ", problems));
}

// Fails naming the op and every null pointer that the op needs.
inline Status CheckNotNull(const char* op,
                           std::initializer_list<std::pair<const char*, const void*>> pointers) {
  std::string problems;
  for (const auto& [name, pointer] : pointers) {
    if (pointer == nullptr) absl::StrAppend(&problems, problems.empty() ? "" : ", ", name);
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer ", problems));
}

}  // namespace strata
