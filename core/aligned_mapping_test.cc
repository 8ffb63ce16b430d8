// MapAligned: the start is aligned for several sizes and alignments; the whole range is
// readable (zero) and writable; the slack was given back (the pages just before and just
// after the range are not mapped: mincore fails with ENOMEM there); munmap of the range
// releases it (mincore fails inside it afterwards).
#include "core/aligned_mapping.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace strata {
namespace {

bool Mapped(const char* page) {
  unsigned char resident = 0;
  const uintptr_t address = reinterpret_cast<uintptr_t>(page) & ~uintptr_t{4095};
  return ::mincore(reinterpret_cast<void*>(address), 4096, &resident) == 0 || errno != ENOMEM;
}

TEST(MapAligned, AlignedWholeAndNothingMore) {
  for (const size_t alignment : {size_t{4096}, size_t{64} << 10, size_t{2} << 20}) {
    for (const size_t bytes : {size_t{4096}, size_t{2} << 20, size_t{6} << 20}) {
      char* data = static_cast<char*>(MapAligned(bytes, alignment));
      ASSERT_NE(data, nullptr) << bytes << " at " << alignment;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % alignment, 0u) << bytes << " at " << alignment;
      EXPECT_EQ(data[0], 0);
      EXPECT_EQ(data[bytes - 1], 0);
      std::memset(data, 0x33, bytes);
      EXPECT_EQ(data[bytes / 2], 0x33);
      if (alignment > 4096) {  // slack only exists where the start had to move
        EXPECT_FALSE(Mapped(data + bytes)) << "the tail slack stayed mapped";
      }
      ASSERT_EQ(::munmap(data, bytes), 0);
      EXPECT_FALSE(Mapped(data)) << "munmap of the range left it mapped";
    }
  }
}

}  // namespace
}  // namespace strata
