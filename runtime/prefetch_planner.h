// The ZeRO stage-3 prefetch planner: from the access trace of one micro-batch and the full
// (gathered) size of every unit, the schedule of all-gathers (fetches) and releases of full
// unit parameters, within a byte budget for what is fetched ahead of need. Pure: no I/O, no
// device, the same input always gives the same plan; the executor (ShardedGatherer in
// zero_components.cc) walks the trace, issuing before[k] ahead of access k and after[k]
// once access k's compute is done.
// Invariants of every plan (checked by prefetch_planner_test.cc against a simulation):
// - the unit of access k is resident while k runs (fetched in before[j], j <= k, and not
//   released since); nothing is resident before access 0 or after the last access;
// - each fetch is matched by exactly one release, after the unit's last use in that
//   residency; a unit is never fetched while resident nor released before it is used;
// - while access k runs, the bytes resident or in flight other than access k's unit
//   ("ahead" bytes) are <= budget_bytes; a unit larger than the budget is still fetched,
//   right before its own access, so nothing is ever skipped or deadlocked;
// - consecutive accesses to one unit never release and refetch it;
// - a larger budget (or window) never adds a fetch nor makes any fetch later.
// Thread-safety: plain values and a pure function; safe to call from any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/status.h"

namespace strata {

struct PrefetchPlanInput {
  // Unit id of each access, in execution order (forward then backward); not empty.
  std::vector<int> trace;
  // Full (gathered) bytes of each unit, indexed by unit id; not empty, every entry > 0.
  std::vector<uint64_t> unit_bytes;
  // zero.prefetch_bytes: bytes of units resident or in flight ahead of need (beyond the
  // unit being computed) at any time. 0: no prefetch, each unit is fetched right before its
  // access. kUnlimitedPrefetchBytes: everything is fetched at the start.
  uint64_t budget_bytes = 0;
  // Cap on the look-ahead distance in accesses: while access k runs, only units needed by
  // accesses k+1 .. k+max_units_ahead may be resident ahead. -1: no cap. 0: no prefetch.
  int max_units_ahead = -1;
};

inline constexpr uint64_t kUnlimitedPrefetchBytes = std::numeric_limits<uint64_t>::max();

enum class PrefetchActionKind { kFetch, kRelease };

struct PrefetchAction {
  PrefetchActionKind kind;
  int unit;

  friend bool operator==(const PrefetchAction& a, const PrefetchAction& b) {
    return a.kind == b.kind && a.unit == b.unit;
  }
  friend bool operator!=(const PrefetchAction& a, const PrefetchAction& b) { return !(a == b); }
};

struct PrefetchPlan {
  // before[k]: fetches to issue before access k, in the order to issue them (access k's own
  // unit first when it is not resident yet, then the units ahead in trace order).
  std::vector<std::vector<PrefetchAction>> before;
  // after[k]: releases to do once access k's compute is done (at most access k's unit).
  std::vector<std::vector<PrefetchAction>> after;
  // frontier[k]: the last access whose unit is resident or in flight while access k runs
  // (k <= frontier[k], non-decreasing in k). frontier[k] - k is the look-ahead at k.
  std::vector<int> frontier;
  uint64_t peak_resident_bytes = 0;  // max over accesses of the bytes of gathered units
  uint64_t peak_ahead_bytes = 0;     // max over accesses of the ahead bytes (<= budget)
  int fetches = 0;                   // all-gathers per micro-batch
  uint64_t fetch_bytes = 0;          // bytes all-gathered per micro-batch (saturating)
};

// Plans one micro-batch. The rule, in full: the frontier f(k) of access k is the furthest
// access f (at most k + max_units_ahead) such that at every access i in k .. f, the distinct
// units needed by accesses i+1 .. f, other than access i's own unit, fit in budget_bytes.
// While access k runs, exactly access k's unit and the units of accesses k+1 .. f(k) are
// resident. So units are fetched strictly in trace order, each as early as the budget allows
// without having to drop it again before its use; and after access k its unit is kept iff
// its next use is within f(k+1) (always when that is access k+1), otherwise released: a
// tied embedding is kept across its gap only if it and everything needed before its next
// use fit in the budget at every access in between. O(trace + units) time.
// Errors: InvalidArgument for an empty trace or unit_bytes, a unit id out of range, a unit
// of 0 bytes, max_units_ahead < -1, or unit bytes whose sum overflows; every problem found
// is listed.
StatusOr<PrefetchPlan> PlanPrefetch(const PrefetchPlanInput& input);

}  // namespace strata
