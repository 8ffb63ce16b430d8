// MPI start-up is detected from the variables of several launchers, not only Open MPI's.
#include "session/ranks.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr const char* kVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                      "PMI_SIZE", "SLURM_NTASKS", "SLURM_PROCID"};

class MpiLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) unsetenv(name);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(MpiLaunchTest, NoLauncherVariableMeansThreads) {
  EXPECT_EQ(MpiLaunchVariable(), nullptr);
  EXPECT_FALSE(UnderMpirun());
}

TEST_F(MpiLaunchTest, EachLaunchersVariableIsRecognised) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    SetUp();
    setenv(name, "1", 1);
    ASSERT_NE(MpiLaunchVariable(), nullptr) << name;
    EXPECT_EQ(std::string(MpiLaunchVariable()), name);
    EXPECT_TRUE(UnderMpirun());
  }
}

TEST_F(MpiLaunchTest, SlurmCountsOnlyWithMoreThanOneTask) {
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "1", 1);
  EXPECT_FALSE(UnderMpirun()) << "one task of srun is not an MPI job";
  setenv("SLURM_NTASKS", "4", 1);
  ASSERT_NE(MpiLaunchVariable(), nullptr);
  EXPECT_EQ(std::string(MpiLaunchVariable()), "SLURM_NTASKS");
}

}  // namespace
}  // namespace strata
