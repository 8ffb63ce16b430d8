// See heads.h.
#include "kernels/cpu/heads.h"

#include <cstring>

namespace strata::cpu {

template <typename T>
void CopyHeadsReference(T* qkv, T* rows, int N, int heads_per_row, int first, int count, int hs,
                        bool to_rows) {
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < count; ++j) {
      for (int d = 0; d < hs; ++d) {
        T& head = qkv[(static_cast<size_t>(n) * heads_per_row + first + j) * hs + d];
        T& row = rows[(static_cast<size_t>(n) * count + j) * hs + d];
        if (to_rows) {
          row = head;
        } else {
          head = row;
        }
      }
    }
  }
}

template <typename T>
void CopyHeads(T* qkv, T* rows, int N, int heads_per_row, int first, int count, int hs,
               bool to_rows) {
  // Each token's heads [first, first + count) are one contiguous run in both layouts.
  const size_t run = static_cast<size_t>(count) * hs * sizeof(T);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * run > (size_t{1} << 16))
  for (int n = 0; n < N; ++n) {
    T* head = qkv + (static_cast<size_t>(n) * heads_per_row + first) * hs;
    T* row = rows + static_cast<size_t>(n) * count * hs;
    if (to_rows) {
      std::memcpy(row, head, run);
    } else {
      std::memcpy(head, row, run);
    }
  }
}

#define STRATA_INSTANTIATE(T)                                                 \
  template void CopyHeadsReference<T>(T*, T*, int, int, int, int, int, bool); \
  template void CopyHeads<T>(T*, T*, int, int, int, int, int, bool);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
