// See aligned_mapping.h.
#include "core/aligned_mapping.h"

#include <sys/mman.h>

#include <cstdint>

namespace strata {

void* MapAligned(size_t bytes, size_t alignment) {
  const size_t reserve = bytes + alignment;
  void* mapping =
      ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapping);
  const uintptr_t aligned = (start + alignment - 1) & ~uintptr_t{alignment - 1};
  if (aligned > start) ::munmap(mapping, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + reserve > end) ::munmap(reinterpret_cast<void*>(end), start + reserve - end);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace strata
