// Status and StatusOr for every module boundary of strata: abseil's types and code set,
// plus the two propagation macros abseil 20220623 lacks. Errors carry their context
// (file, offset, bytes, rank, unit) in the message, written at the call site.
// Thread-safety: the types are values; the macros are plain control flow.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {

using absl::Status;
using absl::StatusOr;

// Turns an errno value into a Status whose message names what was being done.
inline Status ErrnoError(int error_number, const std::string& context) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (error_number) {
    case ENOENT: code = absl::StatusCode::kNotFound; break;
    case EACCES: case EPERM: code = absl::StatusCode::kPermissionDenied; break;
    case ENOSPC: case ENOMEM: code = absl::StatusCode::kResourceExhausted; break;
    case EINVAL: code = absl::StatusCode::kInvalidArgument; break;
    case ENOSYS: case EOPNOTSUPP: code = absl::StatusCode::kUnimplemented; break;
    case EAGAIN: case ETIMEDOUT: code = absl::StatusCode::kUnavailable; break;
    default: break;
  }
  return Status(code, absl::StrCat(context, ": ", std::strerror(error_number)));
}

// Prefixes a non-OK status's message with context (payloads kept); OK passes through.
inline Status Annotate(const Status& status, const std::string& context) {
  if (status.ok()) return status;
  Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&](absl::string_view key, const absl::Cord& value) {
    annotated.SetPayload(key, value);
  });
  return annotated;
}

// The payload that marks an error its rank already printed (session/ranks.cc prints a
// rank's own error before it tells the other ranks, which may end the job): main does not
// print it again.
inline constexpr const char kErrorPrintedPayload[] = "strata/error-printed";
inline bool ErrorAlreadyPrinted(const Status& status) {
  return status.GetPayload(kErrorPrintedPayload).has_value();
}

}  // namespace strata

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status strata_status_ = (expr);            \
    if (!strata_status_.ok()) return strata_status_;   \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns x or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_CONCAT_(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
