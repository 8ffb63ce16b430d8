// Test helpers for nvme/; see test_util.h.
#include "nvme/test_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "nvme/create_io_engine.h"
#include "nvme/io_buffer.h"

namespace strata::nvme::testing {

std::string MakeTestDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(root != nullptr ? root : "/tmp") + "/nvme_test.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
    return root != nullptr ? root : "/tmp";
  }
  return name.data();
}

std::string SkipReason(IoEngineKind engine, const std::string& dir) {
  if (engine == IoEngineKind::kIoUring) {
    Status uring = ProbeIoUring();
    if (!uring.ok()) return "io_uring unavailable here: " + std::string(uring.message());
  }
  const std::string path = dir + "/.o_direct_probe";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return "O_DIRECT unavailable in " + dir + ": " + std::strerror(errno);
  }
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(kDirectIoAlignment);
  std::string reason;
  if (!buffer.ok()) {
    reason = "no I/O buffer: " + std::string(buffer.status().message());
  } else if (::pwrite(fd, buffer->data(), kDirectIoAlignment, 0) !=
             static_cast<ssize_t>(kDirectIoAlignment)) {
    reason = "O_DIRECT write failed in " + dir + ": " + std::strerror(errno);
  }
  ::close(fd);
  ::unlink(path.c_str());
  return reason;
}

void FillPattern(void* data, uint64_t bytes, uint64_t seed, uint64_t file_offset) {
  auto* out = static_cast<uint8_t*>(data);
  for (uint64_t i = 0; i < bytes; ++i) out[i] = PatternByte(seed, file_offset + i);
}

int64_t FirstMismatch(const void* data, uint64_t bytes, uint64_t seed, uint64_t file_offset) {
  const auto* in = static_cast<const uint8_t*>(data);
  for (uint64_t i = 0; i < bytes; ++i) {
    if (in[i] != PatternByte(seed, file_offset + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

void WritePatternFile(const std::string& path, uint64_t bytes, uint64_t seed) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  std::vector<uint8_t> data(bytes);
  FillPattern(data.data(), bytes, seed, 0);
  ASSERT_EQ(::pwrite(fd, data.data(), bytes, 0), static_cast<ssize_t>(bytes));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

}  // namespace strata::nvme::testing
