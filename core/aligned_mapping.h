// MapAligned: an anonymous read-write mapping whose start is aligned beyond the page size
// (2 MiB, for transparent huge pages: the advice must come before the first touch, on memory
// that is the caller's alone). Mapped with room to align; the slack before and after is
// given back at once, so munmap(start, bytes) releases the whole mapping.
// Thread-safety: reentrant.
#pragma once

#include <cstddef>

namespace strata {

// `bytes` > 0 and a multiple of 4 KiB; `alignment` a power of two, a multiple of 4 KiB.
// Null (errno from mmap) when no memory can be mapped. Zero-filled, untouched.
void* MapAligned(size_t bytes, size_t alignment);

}  // namespace strata
