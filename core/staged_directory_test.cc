// Tests directory outputs: a new directory appears whole at commit; an existing one gets
// its files replaced and keeps the others; an abandoned stage leaves the target as it was
// and no staging directory; a signal's removal clears a staging directory; a target that
// is an input, or holds a link where a file would go, is refused before anything moves.
#include "core/staged_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/remove_on_signal.h"
#include "core/run_inputs.h"
#include "core/testing/status_matchers.h"
#include "core/testing/test_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

class StagedDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir();
    ForgetRunInputs();
  }
  static void Write(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static std::string Read(const fs::path& path) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }
  // Entries of root_ other than `keep`.
  std::vector<std::string> Others(const std::string& keep) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(root_)) {
      if (entry.path().filename() != keep) names.push_back(entry.path().filename().string());
    }
    return names;
  }
  fs::path root_;
};

TEST_F(StagedDirectoryTest, ANewDirectoryAppearsWholeAtCommit) {
  const fs::path out = root_ / "out";
  ASSERT_OK_AND_ASSIGN(auto staged, StagedDirectory::Begin(out.string(), "export"));
  Write(fs::path(staged->path()) / "model.safetensors", "weights");
  Write(fs::path(staged->path()) / "config.json", "{}");
  EXPECT_FALSE(fs::exists(out));
  EXPECT_THAT(staged->Commit(), IsOkAndHolds(2));
  EXPECT_EQ(Read(out / "model.safetensors"), "weights");
  EXPECT_EQ(Read(out / "config.json"), "{}");
  staged.reset();
  EXPECT_TRUE(Others("out").empty());
}

TEST_F(StagedDirectoryTest, AnExistingDirectoryKeepsItsOtherFiles) {
  const fs::path out = root_ / "out";
  fs::create_directory(out);
  Write(out / "config.json", "old");
  Write(out / "README.md", "mine");
  ASSERT_OK_AND_ASSIGN(auto staged, StagedDirectory::Begin(out.string(), "export"));
  Write(fs::path(staged->path()) / "config.json", "new");
  ASSERT_OK(staged->Commit().status());
  EXPECT_EQ(Read(out / "config.json"), "new");
  EXPECT_EQ(Read(out / "README.md"), "mine");
  EXPECT_TRUE(Others("out").empty());
}

TEST_F(StagedDirectoryTest, AFailurePartWayLeavesTheTargetAsItWas) {
  const fs::path out = root_ / "out";
  fs::create_directory(out);
  Write(out / "config.json", "old");
  {
    ASSERT_OK_AND_ASSIGN(auto staged, StagedDirectory::Begin(out.string(), "export"));
    Write(fs::path(staged->path()) / "model.safetensors", "new weights");
    // ... and then the writer fails (a full disk at config.json): no Commit.
  }
  EXPECT_EQ(Read(out / "config.json"), "old");
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  EXPECT_TRUE(Others("out").empty());
  // A new target that was never committed does not appear at all.
  { ASSERT_OK(StagedDirectory::Begin((root_ / "fresh").string(), "export").status()); }
  EXPECT_FALSE(fs::exists(root_ / "fresh"));
}

TEST_F(StagedDirectoryTest, ASignalRemovesTheStagingDirectory) {
  ASSERT_OK_AND_ASSIGN(auto staged, StagedDirectory::Begin((root_ / "out").string(), "export"));
  Write(fs::path(staged->path()) / "shard-1", "x");
  Write(fs::path(staged->path()) / "shard-2", "y");
  EXPECT_GE(RemoveRegisteredPaths(), 1);  // what the signal handler does
  EXPECT_FALSE(fs::exists(staged->path()));
}

TEST_F(StagedDirectoryTest, AnInputOrALinkInTheWayIsRefusedBeforeAnythingMoves) {
  const fs::path weights = root_ / "weights";
  fs::create_directory(weights);
  Write(weights / "config.json", "source");
  ASSERT_OK(NoteRunInputPath(weights.string(), "the checkpoint's model.from"));
  EXPECT_THAT(StagedDirectory::Begin(weights.string(), "export: --to hf: directory"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("it is an input of this run (the checkpoint's model.from")));
  const fs::path out = root_ / "out";
  fs::create_directory(out);
  fs::create_symlink(weights / "config.json", out / "config.json");
  ASSERT_OK_AND_ASSIGN(auto staged, StagedDirectory::Begin(out.string(), "export"));
  Write(fs::path(staged->path()) / "model.safetensors", "w");
  Write(fs::path(staged->path()) / "config.json", "new");
  EXPECT_THAT(staged->Commit(), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("a symbolic link")));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  EXPECT_EQ(Read(weights / "config.json"), "source");
}

}  // namespace
}  // namespace strata
