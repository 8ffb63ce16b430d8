// The backstop that turns a C++ exception escaping strata's code (a parser's container that
// could not grow, a library that throws) into a Status, so that a command ends with one
// clear line and exit status 1, never abort()'s 134 and a core file. Parsers of outside
// input return Status themselves; this catches what slips past them. Used by main (each
// command) and by every thread a run starts (session/ranks.cc).
// Thread-safety: a pure function.
#pragma once

#include <functional>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strata {

// Runs `body`; an exception becomes kResourceExhausted (std::bad_alloc: "out of memory
// in WHAT") or kInternal ("WHAT: unexpected exception: ...").
inline Status StatusFromExceptions(const std::function<Status()>& body, const std::string& what) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory in ", what, " (an allocation failed: an input far larger than it "
        "should be, or too little RAM)"));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat(what, ": unexpected exception: ", error.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unexpected exception of unknown type"));
  }
}

}  // namespace strata
