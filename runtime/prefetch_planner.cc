// The ZeRO stage-3 prefetch planner (see prefetch_planner.h for the rule and invariants).
// Two passes: a backward two-pointer sweep computes each access's frontier, the largest
// one that every later access up to it can sustain; a forward pass turns the frontiers
// into fetches and releases and simulates them for the peaks. Why the frontier is the
// minimum over later accesses: a unit fetched ahead counts against the budget until its
// use, and the unit just computed joins the "ahead" set when it is kept for a later use,
// so a frontier that a later access cannot sustain would force dropping a fetched unit
// before its use. Taking the minimum makes frontiers non-decreasing in time and in budget,
// which is what makes every fetch useful and a larger budget never worse.
// Thread-safety: pure function, no shared state.
#include "runtime/prefetch_planner.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_join.h"

namespace strata {
namespace {

constexpr size_t kMaxProblemsListed = 8;

Status Validate(const PrefetchPlanInput& input) {
  std::vector<std::string> problems;
  size_t more = 0;
  auto add = [&](std::string problem) {
    if (problems.size() < kMaxProblemsListed) {
      problems.push_back(std::move(problem));
    } else {
      ++more;
    }
  };
  const int num_units = static_cast<int>(input.unit_bytes.size());
  if (input.trace.empty()) add("the access trace is empty");
  if (input.unit_bytes.empty()) add("unit_bytes is empty");
  if (input.max_units_ahead < -1) {
    add(absl::StrCat("max_units_ahead is ", input.max_units_ahead, " (want -1 or >= 0)"));
  }
  uint64_t total_bytes = 0;
  for (int u = 0; u < num_units; ++u) {
    const uint64_t bytes = input.unit_bytes[u];
    if (bytes == 0) add(absl::StrCat("unit ", u, " has 0 bytes"));
    if (total_bytes > std::numeric_limits<uint64_t>::max() - bytes) {
      add(absl::StrCat("the unit bytes overflow 64 bits at unit ", u));
      break;
    }
    total_bytes += bytes;
  }
  for (size_t k = 0; k < input.trace.size(); ++k) {
    const int unit = input.trace[k];
    if (unit < 0 || unit >= num_units) {
      add(absl::StrCat("access ", k, " names unit ", unit, ", outside [0, ", num_units, ")"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  std::string message = absl::StrCat("prefetch plan input: ", absl::StrJoin(problems, "; "));
  if (more > 0) absl::StrAppend(&message, "; and ", more, " more");
  return absl::InvalidArgumentError(message);
}

// frontier[k] = min over i >= k of g(i), where g(i) is the furthest f <= i + window with
// cost(i, f) = bytes of the distinct units of accesses i+1 .. f other than trace[i] within
// the budget. Sweeping k downwards, frontier[k] <= frontier[k+1] and cost(k, f) grows with
// f, so a window [k+1, right] of unit counts only ever grows on the left and shrinks on the
// right: O(trace) in all.
std::vector<int> Frontiers(const PrefetchPlanInput& input) {
  const std::vector<int>& trace = input.trace;
  const std::vector<uint64_t>& bytes = input.unit_bytes;
  const int num_accesses = static_cast<int>(trace.size());
  std::vector<int> frontier(num_accesses);
  std::vector<int> count(bytes.size(), 0);  // accesses of each unit in [k+1, right]
  uint64_t window_bytes = 0;                // bytes of the distinct units in [k+1, right]
  auto add = [&](int unit) {
    if (count[unit]++ == 0) window_bytes += bytes[unit];
  };
  auto remove = [&](int unit) {
    if (--count[unit] == 0) window_bytes -= bytes[unit];
  };
  int right = num_accesses - 1;  // the window is [k+1, right]; empty for the last access
  for (int k = num_accesses - 1; k >= 0; --k) {
    if (k + 1 <= right) add(trace[k + 1]);
    const int current = trace[k];
    auto ahead_bytes = [&] { return window_bytes - (count[current] > 0 ? bytes[current] : 0); };
    while (right > k && (ahead_bytes() > input.budget_bytes ||
                         (input.max_units_ahead >= 0 && right - k > input.max_units_ahead))) {
      remove(trace[right]);
      --right;
    }
    frontier[k] = right;
  }
  return frontier;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

}  // namespace

StatusOr<PrefetchPlan> PlanPrefetch(const PrefetchPlanInput& input) {
  RETURN_IF_ERROR(Validate(input));
  const std::vector<int>& trace = input.trace;
  const std::vector<uint64_t>& bytes = input.unit_bytes;
  const int num_accesses = static_cast<int>(trace.size());

  // next_use[k]: the next access of trace[k]'s unit after k, or num_accesses.
  std::vector<int> next_use(num_accesses);
  {
    std::vector<int> upcoming(bytes.size(), num_accesses);
    for (int k = num_accesses - 1; k >= 0; --k) {
      next_use[k] = upcoming[trace[k]];
      upcoming[trace[k]] = k;
    }
  }

  PrefetchPlan plan;
  plan.frontier = Frontiers(input);
  plan.before.resize(num_accesses);
  plan.after.resize(num_accesses);
  std::vector<bool> resident(bytes.size(), false);
  uint64_t resident_bytes = 0;
  auto fetch = [&](int k, int unit) {
    plan.before[k].push_back({PrefetchActionKind::kFetch, unit});
    resident[unit] = true;
    resident_bytes += bytes[unit];
    ++plan.fetches;
    plan.fetch_bytes = SaturatingAdd(plan.fetch_bytes, bytes[unit]);
  };
  for (int k = 0; k < num_accesses; ++k) {
    const int unit = trace[k];
    if (!resident[unit]) fetch(k, unit);
    // Accesses up to the previous frontier are resident already: the only unit released
    // since is the previous access's, and only when its next use lies beyond frontier[k].
    const int first_new = (k == 0 ? k : std::max(k, plan.frontier[k - 1])) + 1;
    for (int j = first_new; j <= plan.frontier[k]; ++j) {
      if (!resident[trace[j]]) fetch(k, trace[j]);
    }
    plan.peak_resident_bytes = std::max(plan.peak_resident_bytes, resident_bytes);
    plan.peak_ahead_bytes = std::max(plan.peak_ahead_bytes, resident_bytes - bytes[unit]);
    const bool keep = k + 1 < num_accesses && next_use[k] <= plan.frontier[k + 1];
    if (!keep) {
      plan.after[k].push_back({PrefetchActionKind::kRelease, unit});
      resident[unit] = false;
      resident_bytes -= bytes[unit];
    }
  }
  return plan;
}

}  // namespace strata
