// MPI start-up is detected from the variables of several launchers, not only Open MPI's:
// srun's steps with PMIx, PMI or none (an error naming srun --mpi=pmix), and not a Slurm
// batch script, which is one process.
#include "session/ranks.h"

#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr const char* kVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK",    "PMI_RANK",
                                      "PMI_SIZE",             "SLURM_NTASKS", "SLURM_PROCID",
                                      "SLURM_STEP_NUM_TASKS", "SLURM_MPI_TYPE"};

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
  setenv("SLURM_STEP_NUM_TASKS", "1", 1);
  EXPECT_FALSE(UnderMpirun()) << "one task of srun is not an MPI job";
  EXPECT_EQ(MpiLauncherName(), nullptr);
  EXPECT_TRUE(CheckMpiLaunch().ok());
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  ASSERT_NE(MpiLaunchVariable(), nullptr);
  EXPECT_EQ(std::string(MpiLaunchVariable()), "SLURM_STEP_NUM_TASKS");
}

TEST_F(MpiLaunchTest, ABatchScriptOfManyTasksIsOneProcess) {
  // sbatch -N 2 --ntasks-per-node=2: the script sees the allocation's task count and
  // SLURM_PROCID=0, but no step (no SLURM_STEP_NUM_TASKS): strata run there is not MPI.
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  EXPECT_EQ(MpiLaunchVariable(), nullptr);
  EXPECT_FALSE(UnderMpirun());
  EXPECT_TRUE(CheckMpiLaunch().ok());
}

TEST_F(MpiLaunchTest, SrunWithPmixIsMpiUnderSrun) {
  // What srun --mpi=pmix -N 2 --ntasks-per-node=2 gives each task.
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  setenv("SLURM_MPI_TYPE", "pmix", 1);
  setenv("PMIX_RANK", "2", 1);
  ASSERT_NE(MpiLaunchVariable(), nullptr);
  EXPECT_EQ(std::string(MpiLaunchVariable()), "PMIX_RANK");
  EXPECT_EQ(std::string(MpiLauncherName()), "srun");
  EXPECT_TRUE(CheckMpiLaunch().ok());
}

TEST_F(MpiLaunchTest, MpirunInsideAnAllocationIsMpirun) {
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("PMIX_RANK", "0", 1);
  EXPECT_EQ(std::string(MpiLauncherName()), "mpirun");
  EXPECT_TRUE(CheckMpiLaunch().ok());
}

TEST_F(MpiLaunchTest, SrunWithoutPmixIsAnErrorNamingTheFix) {
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  EXPECT_TRUE(UnderMpirun());
  EXPECT_EQ(std::string(MpiLauncherName()), "srun");
  const Status status = CheckMpiLaunch();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              ::testing::AllOf(::testing::HasSubstr("srun started 4 tasks without PMIx"),
                               ::testing::HasSubstr("--mpi=none"),
                               ::testing::HasSubstr("run srun --mpi=pmix")));
  setenv("SLURM_MPI_TYPE", "cray_shasta", 1);
  EXPECT_THAT(std::string(CheckMpiLaunch().message()),
              ::testing::HasSubstr("(srun --mpi=cray_shasta)"));
  // srun --mpi=pmi2 hands out PMI-2: MPI_Init is left to judge it.
  setenv("PMI_RANK", "1", 1);
  EXPECT_TRUE(CheckMpiLaunch().ok());
}

}  // namespace
}  // namespace strata
