// IoBuffer: page-aligned memory for direct I/O. By default a 2 MiB-aligned anonymous
// mapping advised MADV_HUGEPAGE, because O_DIRECT reads into memory backed by 2 MiB pages
// run about 3x faster on a virtual disk than into 4 KiB pages (fewer segments per request;
// see shared/MACHINE.md). Whether huge pages were actually obtained is measured, not
// assumed: AnonHugePages of the buffer's own mapping in /proc/self/smaps. Where huge pages
// are not possible (THP "never", madvise refused, no 2 MiB of contiguous memory) the buffer
// still works on 4 KiB pages and note() says why.
// Invariants: data() is aligned to 2 MiB (huge) or 4 KiB (otherwise), so it satisfies
// O_DIRECT; the mapping is followed by an inaccessible guard page (an overrun faults, and
// neighbouring buffers' mappings cannot merge, so the smaps figure is this buffer's own).
// Thread-safety: an IoBuffer is a move-only owner and not synchronized; distinct buffers
// are independent. The memory itself may be used by any thread (e.g. an I/O engine).
#pragma once

#include <cstdint>
#include <string>

#include "nvme/io_engine.h"
#include "core/status.h"

namespace strata::nvme {

inline constexpr uint64_t kHugePageBytes = 2ull << 20;

struct IoBufferOptions {
  // Ask for 2 MiB transparent huge pages (2 MiB-aligned mapping + MADV_HUGEPAGE, size
  // rounded up to 2 MiB). When false the mapping is 4 KiB-aligned and advised
  // MADV_NOHUGEPAGE, so it stays on 4 KiB pages even where THP is "always". Default true.
  bool huge_pages = true;
  // Touch every page at allocation, so that the backing is decided (and measured) now and
  // the first I/O does not pay page faults. Default true.
  bool populate = true;
};

class IoBuffer {
 public:
  // `bytes` > 0. Fails only when no memory can be mapped at all (kResourceExhausted).
  static StatusOr<IoBuffer> Allocate(uint64_t bytes, const IoBufferOptions& options = {});

  IoBuffer() = default;
  IoBuffer(IoBuffer&& other) noexcept;
  IoBuffer& operator=(IoBuffer&& other) noexcept;
  IoBuffer(const IoBuffer&) = delete;
  IoBuffer& operator=(const IoBuffer&) = delete;
  ~IoBuffer();

  char* data() const { return data_; }
  // The usable size: the bytes asked, rounded up to 4 KiB.
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }
  BufferRegion region() const { return {data_, bytes_}; }

  bool huge_pages_requested() const { return huge_pages_requested_; }
  // Bytes backed by huge pages, measured after allocation (0 when not populated).
  uint64_t huge_page_bytes() const { return huge_page_bytes_; }
  // True when every 2 MiB page of the buffer is a huge page.
  bool fully_huge_page_backed() const {
    return huge_page_bytes_ > 0 && huge_page_bytes_ >= mapped_bytes_;
  }
  // Why huge pages were not (fully) obtained; empty when they were or were not asked for.
  const std::string& note() const { return note_; }

  // Measures again (pages can be split or collapsed by the kernel later on).
  StatusOr<uint64_t> MeasureHugePageBytes() const;

 private:
  void Release();

  char* data_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t mapped_bytes_ = 0;  // data region (without the guard page)
  bool huge_pages_requested_ = false;
  uint64_t huge_page_bytes_ = 0;
  std::string note_;
};

// The transparent huge page mode: "always", "madvise", "never", or "unavailable".
std::string TransparentHugePageMode();

// AnonHugePages (bytes) of the mappings overlapping [data, data + bytes) in
// /proc/self/smaps; a mapping that extends beyond the range counts at most the overlap.
StatusOr<uint64_t> AnonHugePageBytes(const void* data, uint64_t bytes);

}  // namespace strata::nvme
