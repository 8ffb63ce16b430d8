// Tests the input and output policies together (input_file.h, run_inputs.h, atomic_file.h,
// streaming_output.h), on files the test makes in its own temporary directory:
// - an input must be a regular file within its bound: a FIFO without a writer is refused at
//   once (no hang), a directory and a device are refused naming what they are;
// - a whole-file output never replaces a symbolic link, FIFO or directory at its path, never
//   writes through a planted PATH.partial link, and never overwrites an input of the run
//   (found by inode, under another name too);
// - a streaming output may be a regular file, a null device or a FIFO with a reader, and is
//   refused for a FIFO without one, another character device, a directory or an input
//   (device nodes made in the test's directory, as root; never a system path).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/remove_on_signal.h"
#include "core/input_file.h"
#include "core/run_inputs.h"
#include "core/streaming_output.h"
#include "core/testing/status_matchers.h"
#include "core/testing/test_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

class IoPolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir();
    ForgetRunInputs();
  }
  void TearDown() override { ForgetRunInputs(); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }
  static std::string Read(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }
  std::string Fifo(const std::string& name) const {
    EXPECT_EQ(::mkfifo(Path(name).c_str(), 0600), 0);
    return Path(name);
  }

  fs::path dir_;
};

TEST_F(IoPolicy, AnInputIsARegularFileWithinItsBound) {
  const std::string text = Write("config.json", "{\"a\": 1}");
  EXPECT_THAT(ReadInputFile(text, "--config file", kJsonInputLimit), IsOkAndHolds("{\"a\": 1}"));
  EXPECT_THAT(ReadInputFile(text, "--config file", 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--config file " + text + " is 8 B, more than the 4 B")));
  // A FIFO nobody writes: refused at once, not read (the test would hang otherwise).
  const std::string fifo = Fifo("pipe.json");
  EXPECT_THAT(ReadInputFile(fifo, "--hardware file", kJsonInputLimit),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--hardware file " + fifo + " is a FIFO (named pipe), not a "
                                 "regular file")));
  EXPECT_THAT(ReadInputFile(dir_.string(), "tokenizer file", kTokenizerInputLimit),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory")));
  EXPECT_THAT(ReadInputFile("/dev/zero", "report input", kJsonInputLimit),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a character device")));
  EXPECT_THAT(ReadInputFile(Path("missing"), "report input", kJsonInputLimit),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("report input " + Path("missing"))));
}

TEST_F(IoPolicy, AnInputOpenedIsNotedUnderEveryName) {
  const std::string input = Write("data.txt", "tokens");
  EXPECT_EQ(FindRunInput(input), std::nullopt);
  ASSERT_OK(InputFile::Open(input, "data.path", kNoInputLimit).status());
  ASSERT_EQ(::link(input.c_str(), Path("hard-link").c_str()), 0);
  fs::create_symlink(input, Path("soft-link"));
  for (const std::string& name : {input, Path("hard-link"), Path("soft-link")}) {
    std::optional<std::string> found = FindRunInput(name);
    ASSERT_TRUE(found.has_value()) << name;
    EXPECT_EQ(*found, "data.path " + input);
  }
}

TEST_F(IoPolicy, AWholeFileOutputReplacesOnlyARegularFileThatIsNoInput) {
  const std::string kept = Write("kept.txt", "kept");
  fs::create_symlink(kept, Path("link.txt"));
  EXPECT_THAT(WriteFileAtomically(Path("link.txt"), std::string_view("new"), "--out file"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot write --out file " + Path("link.txt") +
                                 ": it is a symbolic link")));
  EXPECT_TRUE(fs::is_symlink(Path("link.txt")));
  EXPECT_EQ(Read(kept), "kept");

  const std::string fifo = Fifo("out.fifo");
  EXPECT_THAT(WriteFileAtomically(fifo, std::string_view("new")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a FIFO (named pipe)")));
  EXPECT_TRUE(fs::is_fifo(fifo));
  fs::create_directory(Path("sub"));
  EXPECT_THAT(CheckWholeFileOutput(Path("sub"), "--emit file"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it is a directory")));

  // An input of the run, reached through another name: refused, its bytes unchanged.
  const std::string config = Write("config.json", "{}");
  ASSERT_OK(ReadInputFile(config, "--config file", kJsonInputLimit).status());
  ASSERT_EQ(::link(config.c_str(), Path("plan.json").c_str()), 0);
  EXPECT_THAT(WriteFileAtomically(Path("plan.json"), std::string_view("plan"), "--emit file"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("it is an input of this run (--config file " + config + ")")));
  EXPECT_EQ(Read(config), "{}");
  EXPECT_FALSE(fs::exists(Path("plan.json.partial")));

  // A regular file that is no input is replaced whole.
  ASSERT_OK(WriteFileAtomically(kept, std::string_view("replaced")));
  EXPECT_EQ(Read(kept), "replaced");
}

TEST_F(IoPolicy, APartialIsRemovedIfASignalStopsTheWriter) {
  const int before = RegisteredPathCount();
  int during = -1;
  // What the signal handler does (session/interrupt.h) while the bytes are written: the
  // partial file goes; the writer's rename then fails and nothing is left at either name.
  EXPECT_THAT(WriteFileAtomically(Path("big.bin"),
                                  [&](int fd, const std::string& partial) {
                                    during = RegisteredPathCount();
                                    EXPECT_EQ(RemoveRegisteredPaths(), during);
                                    EXPECT_FALSE(fs::exists(partial));
                                    return WriteAllBytes(fd, "x", 1, partial);
                                  }),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("renaming")));
  EXPECT_EQ(during, before + 1);
  EXPECT_FALSE(fs::exists(Path("big.bin")));
  EXPECT_FALSE(fs::exists(Path("big.bin.partial")));
  EXPECT_EQ(RegisteredPathCount(), before);
}

TEST_F(IoPolicy, ADeviceNodeIsNeverReplaced) {
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: making a device node needs root";
  // A node of our own, in the test's directory (never /dev): the same major:minor as
  // /dev/full.
  const std::string node = Path("full");
  ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0600, makedev(1, 7)), 0);
  EXPECT_THAT(WriteFileAtomically(node, std::string_view("x"), "--out file"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a character device")));
  struct stat info {};
  ASSERT_EQ(::lstat(node.c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
  EXPECT_FALSE(fs::exists(node + ".partial"));
}

TEST_F(IoPolicy, AStreamGoesToANullDeviceNotToAnother) {
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: making a device node needs root";
  // Nodes of our own in the test's directory (never /dev): /dev/null's and /dev/full's
  // major:minor.
  const std::string null_node = Path("null"), full_node = Path("full");
  ASSERT_EQ(::mknod(null_node.c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
  ASSERT_EQ(::mknod(full_node.c_str(), S_IFCHR | 0600, makedev(1, 7)), 0);
  ASSERT_OK_AND_ASSIGN(std::FILE * file, OpenStreamingOutput(null_node, "--metrics file", false));
  std::fclose(file);
  EXPECT_THAT(OpenStreamingOutput(full_node, "--metrics file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a character device other than /dev/null")));
}

TEST_F(IoPolicy, APlantedPartialLinkIsNeverWrittenThrough) {
  const std::string victim = Write("victim.txt", "precious");
  fs::create_symlink(victim, Path("out.bin.partial"));
  ASSERT_OK(WriteFileAtomically(Path("out.bin"), std::string_view("output")));
  EXPECT_EQ(Read(victim), "precious");
  EXPECT_EQ(Read(Path("out.bin")), "output");
  EXPECT_FALSE(fs::exists(fs::symlink_status(Path("out.bin.partial"))));
}

TEST_F(IoPolicy, AnOutputDirectoryIsNotAnInputDirectory) {
  fs::create_directory(Path("weights"));
  Write("weights/model.safetensors", "w");
  ASSERT_OK(NoteRunInputPath(Path("weights"), "model.from"));
  EXPECT_THAT(CheckOutputDirectory(Path("weights"), "export directory"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("it is an input of this run (model.from " + Path("weights"))));
  // The files directly in it are inputs too.
  EXPECT_THAT(CheckWholeFileOutput(Path("weights/model.safetensors"), "export file"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("an input of this run")));
  ASSERT_OK(CheckOutputDirectory(Path("elsewhere"), "export directory"));
  EXPECT_THAT(CheckOutputDirectory(Write("file", "x"), "export directory"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a directory")));
}

TEST_F(IoPolicy, AStreamGoesToAFileAFifoWithAReaderOrDevNull) {
  const std::string metrics = Path("m.jsonl");
  ASSERT_OK_AND_ASSIGN(std::FILE * file, OpenStreamingOutput(metrics, "--metrics file", false));
  std::fputs("one\n", file);
  std::fclose(file);
  ASSERT_OK_AND_ASSIGN(file, OpenStreamingOutput(metrics, "--metrics file", true));
  std::fputs("two\n", file);
  std::fclose(file);
  EXPECT_EQ(Read(metrics), "one\ntwo\n");

  const std::string fifo = Fifo("m.fifo");
  EXPECT_THAT(OpenStreamingOutput(fifo, "--metrics file", false),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("nobody reads")));
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  ASSERT_OK_AND_ASSIGN(file, OpenStreamingOutput(fifo, "--metrics file", false));
  std::fputs("live\n", file);
  std::fflush(file);
  char got[8] = {};
  EXPECT_EQ(::read(reader, got, sizeof(got)), 5);
  EXPECT_EQ(std::string(got, 5), "live\n");
  std::fclose(file);
  ::close(reader);
}

TEST_F(IoPolicy, AStreamRefusesDevicesDirectoriesAndInputs) {
  EXPECT_THAT(OpenStreamingOutput(dir_.string(), "--metrics file", false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it is a directory")));
  const std::string data = Write("train.bin", "tokens");
  ASSERT_OK(NoteRunInputPath(data, "data.path"));
  EXPECT_THAT(OpenStreamingOutput(data, "--metrics file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("an input of this run (data.path " + data + ")")));
  EXPECT_EQ(Read(data), "tokens");
}

}  // namespace
}  // namespace strata
