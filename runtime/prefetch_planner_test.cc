// Tests of the prefetch planner. A checker simulates any plan the way the executor runs it
// (before[k] fetches, access k, after[k] releases) and verifies every invariant of
// prefetch_planner.h; it runs over GPT-like traces (equal and unequal unit sizes; budgets 0,
// one block, several blocks, unlimited), over seeded random traces against a brute-force
// frontier, and over budget and window sweeps (a larger one never adds a fetch nor makes
// one later). Two small cases are checked action by action against plans worked by hand.
// Thread-safety: single-threaded tests.
#include "runtime/prefetch_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

using Actions = std::vector<PrefetchAction>;

PrefetchAction Fetch(int unit) { return {PrefetchActionKind::kFetch, unit}; }
PrefetchAction Release(int unit) { return {PrefetchActionKind::kRelease, unit}; }

std::string Describe(const PrefetchPlanInput& input, const PrefetchPlan& plan) {
  std::ostringstream out;
  out << "budget " << input.budget_bytes << ", window " << input.max_units_ahead << "\n";
  for (size_t k = 0; k < input.trace.size(); ++k) {
    out << "  access " << k << " unit " << input.trace[k] << ":";
    if (k < plan.before.size()) {
      for (const PrefetchAction& a : plan.before[k]) out << " F" << a.unit;
    }
    out << " |";
    if (k < plan.after.size()) {
      for (const PrefetchAction& a : plan.after[k]) out << " R" << a.unit;
    }
    if (k < plan.frontier.size()) out << "  frontier " << plan.frontier[k];
    out << "\n";
  }
  return out.str();
}

// What the simulation of a plan observed.
struct Simulation {
  int fetches = 0;
  uint64_t fetch_bytes = 0;
  uint64_t peak_resident_bytes = 0;
  uint64_t peak_ahead_bytes = 0;
  std::vector<int> issued_at;  // per access: where the fetch that serves it was issued
};

// Runs `plan` as the executor would and checks every invariant; failures are reported
// through gtest with the plan attached.
Simulation CheckPlan(const PrefetchPlanInput& input, const PrefetchPlan& plan) {
  SCOPED_TRACE(Describe(input, plan));
  Simulation sim;
  const int num_accesses = static_cast<int>(input.trace.size());
  const int num_units = static_cast<int>(input.unit_bytes.size());
  EXPECT_EQ(plan.before.size(), input.trace.size());
  EXPECT_EQ(plan.after.size(), input.trace.size());
  EXPECT_EQ(plan.frontier.size(), input.trace.size());
  if (plan.before.size() != input.trace.size() || plan.after.size() != input.trace.size() ||
      plan.frontier.size() != input.trace.size()) {
    return sim;
  }
  std::vector<bool> resident(num_units, false);
  std::vector<bool> used_since_fetch(num_units, false);
  std::vector<int> fetched_at(num_units, -1);
  uint64_t resident_bytes = 0;
  sim.issued_at.assign(num_accesses, -1);
  for (int k = 0; k < num_accesses; ++k) {
    const int unit = input.trace[k];
    for (const PrefetchAction& action : plan.before[k]) {
      EXPECT_EQ(action.kind, PrefetchActionKind::kFetch) << "before access " << k;
      EXPECT_TRUE(action.unit >= 0 && action.unit < num_units) << "before access " << k;
      if (action.unit < 0 || action.unit >= num_units) continue;
      EXPECT_FALSE(resident[action.unit])
          << "unit " << action.unit << " fetched while resident, before access " << k;
      if (resident[action.unit]) continue;
      resident[action.unit] = true;
      used_since_fetch[action.unit] = false;
      fetched_at[action.unit] = k;
      resident_bytes += input.unit_bytes[action.unit];
      ++sim.fetches;
      sim.fetch_bytes += input.unit_bytes[action.unit];
    }
    EXPECT_TRUE(resident[unit]) << "unit " << unit << " not resident at access " << k;
    if (!resident[unit]) continue;
    used_since_fetch[unit] = true;
    sim.issued_at[k] = fetched_at[unit];
    const uint64_t ahead_bytes = resident_bytes - input.unit_bytes[unit];
    EXPECT_LE(ahead_bytes, input.budget_bytes) << "ahead bytes at access " << k;
    sim.peak_resident_bytes = std::max(sim.peak_resident_bytes, resident_bytes);
    sim.peak_ahead_bytes = std::max(sim.peak_ahead_bytes, ahead_bytes);

    // Resident now: exactly this access's unit and those of accesses k+1 .. frontier[k],
    // each of which is used again within the window.
    EXPECT_LE(k, plan.frontier[k]);
    EXPECT_LT(plan.frontier[k], num_accesses);
    if (k > 0) {
      EXPECT_LE(plan.frontier[k - 1], plan.frontier[k]) << "at access " << k;
    }
    if (input.max_units_ahead >= 0) {
      EXPECT_LE(plan.frontier[k] - k, input.max_units_ahead) << "at access " << k;
    }
    std::set<int> expected = {unit};
    for (int j = k + 1; j <= plan.frontier[k] && j < num_accesses; ++j) {
      expected.insert(input.trace[j]);
    }
    std::set<int> actual;
    for (int u = 0; u < num_units; ++u) {
      if (resident[u]) actual.insert(u);
    }
    EXPECT_EQ(actual, expected) << "resident set at access " << k;

    for (const PrefetchAction& action : plan.after[k]) {
      EXPECT_EQ(action.kind, PrefetchActionKind::kRelease) << "after access " << k;
      EXPECT_TRUE(action.unit >= 0 && action.unit < num_units) << "after access " << k;
      if (action.unit < 0 || action.unit >= num_units) continue;
      EXPECT_TRUE(resident[action.unit])
          << "unit " << action.unit << " released while not resident, after access " << k;
      EXPECT_TRUE(used_since_fetch[action.unit])
          << "unit " << action.unit << " released unused, after access " << k;
      if (k + 1 < num_accesses) {
        EXPECT_NE(action.unit, input.trace[k + 1])
            << "unit " << action.unit << " released between consecutive uses " << k;
      }
      if (!resident[action.unit]) continue;
      resident[action.unit] = false;
      resident_bytes -= input.unit_bytes[action.unit];
    }
  }
  for (int u = 0; u < num_units; ++u) {
    EXPECT_FALSE(resident[u]) << "unit " << u << " resident after the last access";
  }
  EXPECT_EQ(plan.fetches, sim.fetches);
  EXPECT_EQ(plan.fetch_bytes, sim.fetch_bytes);
  EXPECT_EQ(plan.peak_resident_bytes, sim.peak_resident_bytes);
  EXPECT_EQ(plan.peak_ahead_bytes, sim.peak_ahead_bytes);
  return sim;
}

// The rule of prefetch_planner.h written the slow, obvious way: g(i) is the furthest f
// whose distinct units after i (other than trace[i]) fit, frontier[k] = min of g over k...
std::vector<int> NaiveFrontiers(const PrefetchPlanInput& input) {
  const int n = static_cast<int>(input.trace.size());
  std::vector<int> g(n);
  for (int i = 0; i < n; ++i) {
    int f = i;
    for (int candidate = i + 1; candidate < n; ++candidate) {
      if (input.max_units_ahead >= 0 && candidate - i > input.max_units_ahead) break;
      std::set<int> units(input.trace.begin() + i + 1, input.trace.begin() + candidate + 1);
      units.erase(input.trace[i]);
      uint64_t bytes = 0;
      for (int u : units) bytes += input.unit_bytes[u];
      if (bytes > input.budget_bytes) break;
      f = candidate;
    }
    g[i] = f;
  }
  std::vector<int> frontier(n);
  for (int k = 0; k < n; ++k) frontier[k] = *std::min_element(g.begin() + k, g.end());
  return frontier;
}

PrefetchPlan PlanOrDie(const PrefetchPlanInput& input) {
  StatusOr<PrefetchPlan> plan = PlanPrefetch(input);
  EXPECT_OK(plan);
  return plan.ok() ? *std::move(plan) : PrefetchPlan{};
}

// A GPT trace with L blocks: units [embedding, block 0..L-1, final norm]; forward
// embed, blocks, final norm, lm_head (the tied embedding), then the same in reverse.
std::vector<int> GptTrace(int layers) {
  std::vector<int> forward = {0};
  for (int l = 0; l < layers; ++l) forward.push_back(l + 1);
  forward.push_back(layers + 1);
  forward.push_back(0);
  std::vector<int> trace = forward;
  trace.insert(trace.end(), forward.rbegin(), forward.rend());
  return trace;
}

std::vector<uint64_t> GptBytes(int layers, uint64_t embedding, uint64_t block, uint64_t norm) {
  std::vector<uint64_t> bytes = {embedding};
  for (int l = 0; l < layers; ++l) bytes.push_back(block);
  bytes.push_back(norm);
  return bytes;
}

// Sweeps budgets (ascending) over one trace: every plan valid, and a larger budget never
// adds a fetch, never makes a fetch later, never pulls a frontier back.
void CheckBudgetSweep(PrefetchPlanInput input, const std::vector<uint64_t>& budgets) {
  Simulation previous_sim;
  PrefetchPlan previous;
  for (size_t b = 0; b < budgets.size(); ++b) {
    input.budget_bytes = budgets[b];
    PrefetchPlan plan = PlanOrDie(input);
    Simulation sim = CheckPlan(input, plan);
    if (b > 0) {
      SCOPED_TRACE(Describe(input, plan));
      EXPECT_LE(plan.fetches, previous.fetches) << "budget " << budgets[b];
      EXPECT_LE(plan.fetch_bytes, previous.fetch_bytes) << "budget " << budgets[b];
      for (size_t k = 0; k < input.trace.size(); ++k) {
        EXPECT_LE(sim.issued_at[k], previous_sim.issued_at[k]) << "access " << k;
        EXPECT_GE(plan.frontier[k], previous.frontier[k]) << "access " << k;
      }
    }
    previous = std::move(plan);
    previous_sim = std::move(sim);
  }
}

TEST(PrefetchPlanner, HandWorkedBudgetZero) {
  // Units: embedding 4 bytes, blocks 2, final norm 1. Trace (L = 2):
  //   access: 0  1  2  3  4  5  6  7  8  9
  //   unit:   0  1  2  3  0  0  3  2  1  0
  PrefetchPlanInput input;
  input.trace = GptTrace(2);
  input.unit_bytes = GptBytes(2, 4, 2, 1);
  ASSERT_EQ(input.trace, (std::vector<int>{0, 1, 2, 3, 0, 0, 3, 2, 1, 0}));
  input.budget_bytes = 0;
  PrefetchPlan plan = PlanOrDie(input);
  // Each unit right before its use, released right after, except the embedding kept
  // between the lm_head forward (4) and its backward (5).
  EXPECT_EQ(plan.before, (std::vector<Actions>{{Fetch(0)},
                                               {Fetch(1)},
                                               {Fetch(2)},
                                               {Fetch(3)},
                                               {Fetch(0)},
                                               {},
                                               {Fetch(3)},
                                               {Fetch(2)},
                                               {Fetch(1)},
                                               {Fetch(0)}}));
  EXPECT_EQ(plan.after, (std::vector<Actions>{{Release(0)},
                                              {Release(1)},
                                              {Release(2)},
                                              {Release(3)},
                                              {},
                                              {Release(0)},
                                              {Release(3)},
                                              {Release(2)},
                                              {Release(1)},
                                              {Release(0)}}));
  EXPECT_EQ(plan.frontier, (std::vector<int>{0, 1, 2, 3, 5, 5, 6, 7, 8, 9}));
  EXPECT_EQ(plan.fetches, 9);
  EXPECT_EQ(plan.fetch_bytes, 22u);
  EXPECT_EQ(plan.peak_resident_bytes, 4u);
  EXPECT_EQ(plan.peak_ahead_bytes, 0u);
  CheckPlan(input, plan);
}

TEST(PrefetchPlanner, HandWorkedBudgetOneBlock) {
  // Same units and trace, budget = one block (2 bytes). Frontiers by hand: g = furthest
  // access whose distinct units after i, other than unit(i), fit in 2 bytes:
  //   g = 1 2 3 3 6 6 7 8 8 9, and frontier = suffix minimum = 1 2 3 3 6 6 7 8 8 9.
  // - blocks are fetched one access ahead (one block fits); the embedding (4 > 2) is
  //   never fetched ahead, only right before its use (accesses 0, 4, 9);
  // - the final norm (1 byte) is kept from access 3 to 6 across the tied head: its next use
  //   (6) is within frontier[4] = 6;
  // - the embedding is kept from 4 to 5 (consecutive), released after 5: its next use (9)
  //   is beyond frontier[6] = 7.
  PrefetchPlanInput input;
  input.trace = GptTrace(2);
  input.unit_bytes = GptBytes(2, 4, 2, 1);
  input.budget_bytes = 2;
  PrefetchPlan plan = PlanOrDie(input);
  EXPECT_EQ(plan.before, (std::vector<Actions>{{Fetch(0), Fetch(1)},
                                               {Fetch(2)},
                                               {Fetch(3)},
                                               {},
                                               {Fetch(0)},
                                               {},
                                               {Fetch(2)},
                                               {Fetch(1)},
                                               {},
                                               {Fetch(0)}}));
  EXPECT_EQ(plan.after, (std::vector<Actions>{{Release(0)},
                                              {Release(1)},
                                              {Release(2)},
                                              {},
                                              {},
                                              {Release(0)},
                                              {Release(3)},
                                              {Release(2)},
                                              {Release(1)},
                                              {Release(0)}}));
  EXPECT_EQ(plan.frontier, (std::vector<int>{1, 2, 3, 3, 6, 6, 7, 8, 8, 9}));
  EXPECT_EQ(plan.fetches, 8);
  EXPECT_EQ(plan.fetch_bytes, 21u);
  EXPECT_EQ(plan.peak_resident_bytes, 6u);  // access 0: embedding + block 0 in flight
  EXPECT_EQ(plan.peak_ahead_bytes, 2u);
  CheckPlan(input, plan);
}

TEST(PrefetchPlanner, GptBudgetZeroFetchesRightBeforeUse) {
  for (int layers : {1, 4, 12}) {
    PrefetchPlanInput input;
    input.trace = GptTrace(layers);
    input.unit_bytes = GptBytes(layers, 500, 100, 1);
    PrefetchPlan plan = PlanOrDie(input);
    Simulation sim = CheckPlan(input, plan);
    const int num_accesses = static_cast<int>(input.trace.size());
    const int tied = layers + 3;  // the embedding's backward, right after its forward use
    EXPECT_EQ(plan.fetches, num_accesses - 1);
    for (int k = 0; k < num_accesses; ++k) {
      if (k == tied) {
        EXPECT_TRUE(plan.before[k].empty());
      } else {
        EXPECT_EQ(plan.before[k], Actions{Fetch(input.trace[k])}) << "access " << k;
        EXPECT_EQ(sim.issued_at[k], k);
      }
    }
    EXPECT_EQ(plan.peak_resident_bytes, 500u);
  }
}

TEST(PrefetchPlanner, GptUnlimitedBudgetFetchesEachUnitOnce) {
  for (int layers : {1, 4, 12}) {
    PrefetchPlanInput input;
    input.trace = GptTrace(layers);
    input.unit_bytes = GptBytes(layers, 500, 100, 1);
    input.budget_bytes = kUnlimitedPrefetchBytes;
    PrefetchPlan plan = PlanOrDie(input);
    CheckPlan(input, plan);
    EXPECT_EQ(plan.fetches, layers + 2);
    Actions all;
    for (int u = 0; u < layers + 2; ++u) all.push_back(Fetch(u));
    EXPECT_EQ(plan.before[0], all);  // everything at once, in first-use order
    EXPECT_EQ(plan.peak_resident_bytes, 500u + 100u * layers + 1u);
  }
}

TEST(PrefetchPlanner, GptEqualUnitsBudgetOneUnitStallsOnlyOnTheFirstAccess) {
  const int layers = 6;
  PrefetchPlanInput input;
  input.trace = GptTrace(layers);
  input.unit_bytes = GptBytes(layers, 100, 100, 100);
  input.budget_bytes = 100;
  PrefetchPlan plan = PlanOrDie(input);
  Simulation sim = CheckPlan(input, plan);
  for (size_t k = 1; k < input.trace.size(); ++k) {
    EXPECT_LT(sim.issued_at[k], static_cast<int>(k)) << "access " << k << " waits for its fetch";
  }
  // Forward: every unit once and the embedding again for the head; the final norm is kept
  // across the tied head; backward: every block and the embedding again.
  EXPECT_EQ(plan.fetches, 2 * layers + 4);
  EXPECT_EQ(plan.peak_resident_bytes, 200u);
}

TEST(PrefetchPlanner, GptBudgetSweeps) {
  for (int layers : {1, 3, 8}) {
    for (bool equal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << layers << " layers, equal sizes " << equal);
      PrefetchPlanInput input;
      input.trace = GptTrace(layers);
      const uint64_t block = 1000;
      input.unit_bytes =
          equal ? GptBytes(layers, block, block, block) : GptBytes(layers, 3 * block, block, 7);
      CheckBudgetSweep(input, {0, block - 1, block, block + 7, 2 * block, 3 * block, 4 * block + 7,
                               10 * block, kUnlimitedPrefetchBytes});
    }
  }
}

TEST(PrefetchPlanner, UnitLargerThanBudgetIsFetchedRightBeforeUse) {
  PrefetchPlanInput input;
  input.trace = GptTrace(4);
  input.unit_bytes = GptBytes(4, 50, 40, 30);
  input.budget_bytes = 29;  // smaller than every unit: the same plan as no prefetch
  PrefetchPlan small = PlanOrDie(input);
  CheckPlan(input, small);
  input.budget_bytes = 0;
  PrefetchPlan none = PlanOrDie(input);
  EXPECT_EQ(small.before, none.before);
  EXPECT_EQ(small.after, none.after);
}

TEST(PrefetchPlanner, WindowCapsLookAhead) {
  PrefetchPlanInput input;
  input.trace = GptTrace(6);
  input.unit_bytes = GptBytes(6, 10, 10, 10);
  input.budget_bytes = kUnlimitedPrefetchBytes;
  for (int window : {0, 1, 2, 5}) {
    input.max_units_ahead = window;
    PrefetchPlan plan = PlanOrDie(input);
    CheckPlan(input, plan);
    EXPECT_EQ(plan.frontier, NaiveFrontiers(input)) << "window " << window;
  }
  // A window of 0 is no prefetch, whatever the budget.
  input.max_units_ahead = 0;
  PrefetchPlan zero_window = PlanOrDie(input);
  input.max_units_ahead = -1;
  input.budget_bytes = 0;
  PrefetchPlan zero_budget = PlanOrDie(input);
  EXPECT_EQ(zero_window.before, zero_budget.before);
  EXPECT_EQ(zero_window.after, zero_budget.after);
}

TEST(PrefetchPlanner, RepeatedAccessesNeverRefetch) {
  PrefetchPlanInput input;
  input.trace = {2, 2, 2, 0, 0, 1, 1, 1, 2, 2};
  input.unit_bytes = {8, 8, 8};
  input.budget_bytes = 0;
  PrefetchPlan plan = PlanOrDie(input);
  CheckPlan(input, plan);
  EXPECT_EQ(plan.fetches, 4);
}

// Seeded random traces: units of random sizes, traces that repeat units both back to back
// and far apart, random budgets and windows; every plan valid and equal to the brute-force
// frontier, and budget and window sweeps monotone.
TEST(PrefetchPlanner, RandomTraces) {
  std::mt19937_64 rng(0x5eed'2024);
  auto uniform = [&](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };
  for (int c = 0; c < 400; ++c) {
    SCOPED_TRACE(::testing::Message() << "case " << c);
    PrefetchPlanInput input;
    const int num_units = static_cast<int>(uniform(1, 8));
    for (int u = 0; u < num_units; ++u) input.unit_bytes.push_back(uniform(1, 100));
    const int length = static_cast<int>(uniform(1, 40));
    for (int k = 0; k < length; ++k) {
      const bool repeat = k > 0 && uniform(0, 3) == 0;
      input.trace.push_back(repeat ? input.trace.back()
                                   : static_cast<int>(uniform(0, num_units - 1)));
    }
    input.max_units_ahead = uniform(0, 2) == 0 ? static_cast<int>(uniform(0, 6)) : -1;
    input.budget_bytes = uniform(0, 3) == 0 ? kUnlimitedPrefetchBytes : uniform(0, 300);
    PrefetchPlan plan = PlanOrDie(input);
    CheckPlan(input, plan);
    EXPECT_EQ(plan.frontier, NaiveFrontiers(input)) << Describe(input, plan);

    std::vector<uint64_t> budgets = {0};
    for (int b = 0; b < 6; ++b) budgets.push_back(budgets.back() + uniform(0, 80));
    budgets.push_back(kUnlimitedPrefetchBytes);
    CheckBudgetSweep(input, budgets);

    // Windows, ascending, at a fixed budget: the same monotonicity.
    PrefetchPlan previous;
    for (int window : {0, 1, 2, 3, 5, 8, -1}) {
      input.max_units_ahead = window;
      PrefetchPlan windowed = PlanOrDie(input);
      CheckPlan(input, windowed);
      if (window != 0) {
        EXPECT_LE(windowed.fetches, previous.fetches) << "window " << window;
      }
      previous = std::move(windowed);
    }
  }
}

TEST(PrefetchPlanner, RejectsBadInput) {
  PrefetchPlanInput good;
  good.trace = {0, 1, 0};
  good.unit_bytes = {4, 4};
  ASSERT_OK(PlanPrefetch(good));

  auto expect_invalid = [](const PrefetchPlanInput& input, const std::string& needle) {
    EXPECT_THAT(PlanPrefetch(input),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(needle)));
  };
  PrefetchPlanInput input = good;
  input.trace.clear();
  expect_invalid(input, "trace is empty");
  input = good;
  input.unit_bytes.clear();
  expect_invalid(input, "unit_bytes is empty");
  input = good;
  input.trace = {0, 2};
  expect_invalid(input, "access 1 names unit 2");
  input.trace = {-1};
  expect_invalid(input, "access 0 names unit -1");
  input = good;
  input.unit_bytes = {4, 0};
  expect_invalid(input, "unit 1 has 0 bytes");
  input = good;
  input.max_units_ahead = -2;
  expect_invalid(input, "max_units_ahead is -2");
  input = good;
  input.unit_bytes = {kUnlimitedPrefetchBytes, 1};
  expect_invalid(input, "overflow");
  // Every problem at once.
  input = good;
  input.trace = {0, 5, 7};
  input.max_units_ahead = -3;
  EXPECT_THAT(PlanPrefetch(input),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("unit 5"), HasSubstr("unit 7"),
                                        HasSubstr("max_units_ahead"))));
}

}  // namespace
}  // namespace strata
