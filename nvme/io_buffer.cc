// IoBuffer: aligned, huge-page-backed where possible; see io_buffer.h.
#include "nvme/io_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/aligned_mapping.h"

namespace strata::nvme {
namespace {

constexpr uint64_t kSmallPageBytes = 4096;
constexpr uint64_t kGuardBytes = 4096;

uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

std::string TransparentHugePageMode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!file || !std::getline(file, line)) return "unavailable";
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "unavailable";
  return line.substr(open + 1, close - open - 1);
}

StatusOr<uint64_t> AnonHugePageBytes(const void* data, uint64_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return ErrnoError(errno, "nvme: reading /proc/self/smaps");
  const uint64_t begin = reinterpret_cast<uintptr_t>(data);
  const uint64_t end = begin + bytes;
  uint64_t total = 0;
  uint64_t overlap = 0;  // of the current mapping with [begin, end); 0 = not ours
  std::string line;
  while (std::getline(smaps, line)) {
    uint64_t low = 0, high = 0;
    char dash = 0;
    // Mapping headers start with "low-high "; field lines with a capitalised name.
    if (std::sscanf(line.c_str(), "%" SCNx64 "%c%" SCNx64, &low, &dash, &high) == 3 &&
        dash == '-') {
      const uint64_t from = std::max(low, begin);
      const uint64_t to = std::min(high, end);
      overlap = to > from ? to - from : 0;
      continue;
    }
    if (overlap == 0 || line.rfind("AnonHugePages:", 0) != 0) continue;
    uint64_t kib = 0;
    if (std::sscanf(line.c_str() + 14, "%" SCNu64, &kib) == 1) {
      total += std::min(kib * 1024, overlap);
    }
  }
  return total;
}

StatusOr<IoBuffer> IoBuffer::Allocate(uint64_t bytes, const IoBufferOptions& options) {
  if (bytes == 0) return absl::InvalidArgumentError("nvme: IoBuffer of 0 bytes");
  IoBuffer buffer;
  buffer.bytes_ = RoundUp(bytes, kSmallPageBytes);
  buffer.huge_pages_requested_ = options.huge_pages;
  char* data = nullptr;
  uint64_t mapped = 0;

  if (options.huge_pages) {
    mapped = RoundUp(bytes, kHugePageBytes);
    // Aligned to 2 MiB, with one guard page after the data.
    data = static_cast<char*>(MapAligned(mapped + kGuardBytes, kHugePageBytes));
    if (data == nullptr) {
      buffer.note_ = absl::StrFormat(
          "mmap of %d bytes for 2 MiB alignment failed (%s); "
          "using 4 KiB pages",
          mapped + kGuardBytes, std::strerror(errno));
    } else {
      ::mprotect(data + mapped, kGuardBytes, PROT_NONE);
      if (::madvise(data, mapped, MADV_HUGEPAGE) != 0) {
        buffer.note_ = absl::StrFormat(
            "madvise(MADV_HUGEPAGE): %s (transparent huge pages "
            "mode: %s)",
            std::strerror(errno), TransparentHugePageMode());
      }
    }
  }
  if (data == nullptr) {
    mapped = buffer.bytes_;
    void* base = ::mmap(nullptr, mapped + kGuardBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      return ErrnoError(errno, absl::StrFormat("nvme: mmap of a %d-byte I/O buffer", mapped));
    }
    data = static_cast<char*>(base);
    ::mprotect(data + mapped, kGuardBytes, PROT_NONE);
    // Keep 4 KiB pages even where THP is "always" (the baseline the benchmark compares to).
    ::madvise(data, mapped, MADV_NOHUGEPAGE);
  }
  buffer.data_ = data;
  buffer.mapped_bytes_ = mapped;

  if (options.populate) {
    // A write fault per page decides its backing now (a read would map the zero page).
    volatile char* touch = data;
    for (uint64_t offset = 0; offset < mapped; offset += kSmallPageBytes) touch[offset] = 0;
    if (buffer.huge_pages_requested_ && data != nullptr) {
      StatusOr<uint64_t> huge = AnonHugePageBytes(data, mapped);
      if (huge.ok()) {
        buffer.huge_page_bytes_ = *huge;
        if (*huge < mapped && buffer.note_.empty()) {
          buffer.note_ = absl::StrFormat(
              "only %d of %d bytes on huge pages (transparent huge pages mode: %s; memory "
              "may be fragmented)",
              *huge, mapped, TransparentHugePageMode());
        }
      } else if (buffer.note_.empty()) {
        buffer.note_ = absl::StrCat("huge pages not measurable: ", huge.status().message());
      }
    }
  } else if (buffer.huge_pages_requested_ && buffer.note_.empty()) {
    buffer.note_ = "not populated: huge pages are decided at first touch";
  }
  return buffer;
}

StatusOr<uint64_t> IoBuffer::MeasureHugePageBytes() const {
  if (data_ == nullptr) return uint64_t{0};
  return AnonHugePageBytes(data_, mapped_bytes_);
}

IoBuffer::IoBuffer(IoBuffer&& other) noexcept { *this = std::move(other); }

IoBuffer& IoBuffer::operator=(IoBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    huge_pages_requested_ = std::exchange(other.huge_pages_requested_, false);
    huge_page_bytes_ = std::exchange(other.huge_page_bytes_, 0);
    note_ = std::move(other.note_);
    other.note_.clear();
  }
  return *this;
}

IoBuffer::~IoBuffer() { Release(); }

void IoBuffer::Release() {
  if (data_ != nullptr) ::munmap(data_, mapped_bytes_ + kGuardBytes);
  data_ = nullptr;
  bytes_ = 0;
  mapped_bytes_ = 0;
}

}  // namespace strata::nvme
