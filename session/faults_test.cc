// The fault suite's settings read from the environment: each parsed into what acts on it,
// nothing set means no fault, and a value that does not parse is refused naming its
// variable before any work.
#include "session/faults.h"

#include <signal.h>
#include <stdlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

void Clear() {
  for (const char* name : {"STRATA_FAULT_NVME", "STRATA_FAULT_CHECKPOINT", "STRATA_FAULT_SIGNAL",
                           "STRATA_FAULT_TRACE_CLOCK"}) {
    ::unsetenv(name);
  }
}

TEST(Faults, NoneSetIsNoFault) {
  Clear();
  ASSERT_OK_AND_ASSIGN(const RunFaults faults, FaultsFromEnvironment());
  EXPECT_FALSE(faults.nvme.has_value());
  EXPECT_FALSE(faults.checkpoint.has_value());
  EXPECT_FALSE(faults.signal.has_value());
  EXPECT_EQ(faults.trace_clock_skew_ms, 0);
}

TEST(Faults, EachVariableParsedIntoWhatActsOnIt) {
  Clear();
  ::setenv("STRATA_FAULT_NVME", "torn@3", 1);
  ::setenv("STRATA_FAULT_CHECKPOINT", "enospc@4:2", 1);
  ::setenv("STRATA_FAULT_SIGNAL", "SIGINT*2@5", 1);
  ::setenv("STRATA_FAULT_TRACE_CLOCK", "-2500", 1);
  ASSERT_OK_AND_ASSIGN(const RunFaults faults, FaultsFromEnvironment());
  EXPECT_EQ(faults.trace_clock_skew_ms, -2500);
  ASSERT_TRUE(faults.nvme.has_value());
  ASSERT_EQ(faults.nvme->rules.size(), 1u);
  EXPECT_EQ(faults.nvme->rules[0].kind, nvme::FaultKind::kTornWrite);
  EXPECT_EQ(faults.nvme->rules[0].skip, 3u);
  EXPECT_EQ(faults.nvme->source, "torn@3");
  ASSERT_TRUE(faults.checkpoint.has_value());
  EXPECT_EQ(faults.checkpoint->action, CheckpointFault::Action::kEnospc);
  EXPECT_EQ(faults.checkpoint->step, 4);
  EXPECT_EQ(faults.checkpoint->unit, 2);
  ASSERT_TRUE(faults.signal.has_value());
  EXPECT_EQ(faults.signal->signal_number, SIGINT);
  EXPECT_EQ(faults.signal->times, 2);
  EXPECT_EQ(faults.signal->step, 5);
  Clear();
}

// The checkpoint writer's phases: a unit on every rank or one, the manifest, the removal of
// older checkpoints.
TEST(Faults, CheckpointFaultsNameTheirPhaseAndRank) {
  ASSERT_OK_AND_ASSIGN(std::optional<CheckpointFault> unit, ParseCheckpointFault("kill@6:1:1"));
  ASSERT_TRUE(unit.has_value());
  EXPECT_EQ(unit->action, CheckpointFault::Action::kKill);
  EXPECT_EQ(unit->phase, CheckpointFault::Phase::kUnit);
  EXPECT_EQ(unit->step, 6);
  EXPECT_EQ(unit->unit, 1);
  EXPECT_EQ(unit->rank, 1);
  ASSERT_OK_AND_ASSIGN(std::optional<CheckpointFault> manifest,
                       ParseCheckpointFault("enospc@4:manifest"));
  EXPECT_EQ(manifest->phase, CheckpointFault::Phase::kManifest);
  EXPECT_EQ(manifest->rank, -1);
  ASSERT_OK_AND_ASSIGN(std::optional<CheckpointFault> keep, ParseCheckpointFault("kill@8:keep:0"));
  EXPECT_EQ(keep->phase, CheckpointFault::Phase::kKeep);
  EXPECT_EQ(keep->step, 8);
  EXPECT_EQ(keep->rank, 0);
  for (const char* bad : {"kill@6:nowhere", "kill@6:1:-1", "kill@6:1:1:1", "kill6:1", "kill@6"}) {
    EXPECT_THAT(ParseCheckpointFault(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad)))
        << bad;
  }
}

TEST(Faults, UnparsableValuesAreRefusedNamingTheVariable) {
  const struct {
    const char* name;
    const char* value;
  } cases[] = {{"STRATA_FAULT_NVME", "melt@1"},
               {"STRATA_FAULT_CHECKPOINT", "kill@x:1"},
               {"STRATA_FAULT_CHECKPOINT", "burn@1:1"},
               {"STRATA_FAULT_SIGNAL", "SIGFOO@1"},
               {"STRATA_FAULT_SIGNAL", "SIGINT*0@1"},
               {"STRATA_FAULT_SIGNAL", "SIGTERM"},
               {"STRATA_FAULT_TRACE_CLOCK", "3s"},
               {"STRATA_FAULT_TRACE_CLOCK", "2000000"}};
  for (const auto& c : cases) {
    Clear();
    ::setenv(c.name, c.value, 1);
    EXPECT_THAT(FaultsFromEnvironment(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(c.name), HasSubstr(c.value))))
        << c.name << "=" << c.value;
  }
  Clear();
}

TEST(Faults, SignalFaultRaisesOnlyAtItsStep) {
  const SignalFault fault{SIGUSR1, 1, 2};
  ::signal(SIGUSR1, SIG_IGN);  // raised, and ignored here
  EXPECT_EQ(MaybeRaiseFaultSignal(&fault, 1), 0);
  EXPECT_EQ(MaybeRaiseFaultSignal(&fault, 2), SIGUSR1);
  EXPECT_EQ(MaybeRaiseFaultSignal(nullptr, 2), 0);
}

}  // namespace
}  // namespace strata
