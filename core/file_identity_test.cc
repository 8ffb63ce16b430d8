// Tests content identities: a small file's every byte counts; a large file's stripes count
// (its first and last MiB, one in the middle) and its size counts, while a byte between
// the stripes does not (the documented limit of sampling); a directory's identity changes
// with a file's content or name, not with the order files were made.
#include "core/file_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/testing/status_matchers.h"
#include "core/testing/test_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class FileIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir();
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  void Poke(const std::string& name, uint64_t offset, char value) const {
    std::fstream file(Path(name), std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(static_cast<std::streamoff>(offset));
    file.put(value);
  }
  uint64_t Id(const std::string& name) const {
    StatusOr<uint64_t> id = ContentIdentity(Path(name), "test file");
    EXPECT_OK(id.status());
    return id.value_or(0);
  }
  fs::path dir_;
};

TEST_F(FileIdentityTest, EveryByteOfASmallFileCounts) {
  Write("a", std::string(1000, 'x'));
  const uint64_t first = Id("a");
  EXPECT_EQ(Id("a"), first);
  Poke("a", 500, 'y');
  EXPECT_NE(Id("a"), first);
  Write("b", std::string(1001, 'x'));
  EXPECT_NE(Id("b"), first);
}

TEST_F(FileIdentityTest, ALargeFileIsSampledInStripes) {
  const uint64_t size = kWholeHashBytes + 5 * kStripeBytes + 12345;
  Write("big", std::string(size, '\0'));
  const uint64_t first = Id("big");
  const uint64_t step = (size - kStripeBytes) / (kStripes - 1);
  for (uint64_t offset : {uint64_t{0}, size - 1, step * 31 + 7}) {  // inside stripes
    Poke("big", offset, 'z');
    EXPECT_NE(Id("big"), first) << offset;
    Poke("big", offset, '\0');
  }
  EXPECT_EQ(Id("big"), first);
  Poke("big", step * 31 + kStripeBytes + 10, 'z');  // between two stripes: not seen
  EXPECT_EQ(Id("big"), first);
}

TEST_F(FileIdentityTest, ADirectoryCombinesItsFilesByName) {
  fs::create_directory(Path("m1"));
  Write("m1/config.json", "{}");
  Write("m1/model.safetensors", "weights");
  fs::create_directory(Path("m2"));
  Write("m2/model.safetensors", "weights");
  Write("m2/config.json", "{}");
  EXPECT_EQ(Id("m1"), Id("m2"));
  Write("m2/model.safetensors", "weightz");
  EXPECT_NE(Id("m1"), Id("m2"));
  fs::rename(Path("m2/model.safetensors"), Path("m2/other.safetensors"));
  Write("m2/other.safetensors", "weights");
  EXPECT_NE(Id("m1"), Id("m2"));
}

}  // namespace
}  // namespace strata
