// Fixed rank-order sums on the host. See reduce.h. The work goes in blocks of kBlock
// elements through an fp32 accumulator on the stack, so aliasing outputs are written only
// after every source of the block was read, and the inner loops vectorize.
#include "collectives/reduce.h"

#include <algorithm>
#include <cstring>

namespace strata {
namespace {

constexpr size_t kBlock = 1024;

template <typename T>
void SumTyped(const void* const* sources, int num_sources, void* const* outputs, int num_outputs,
              size_t count) {
  float acc[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    const T* first = static_cast<const T*>(sources[0]) + begin;
    for (size_t i = 0; i < n; ++i) acc[i] = Load(first + i);
    for (int s = 1; s < num_sources; ++s) {
      const T* source = static_cast<const T*>(sources[s]) + begin;
      for (size_t i = 0; i < n; ++i) acc[i] += Load(source + i);
    }
    for (int k = 0; k < num_outputs; ++k) {
      T* out = static_cast<T*>(outputs[k]) + begin;
      for (size_t i = 0; i < n; ++i) Store(out + i, acc[i]);
    }
  }
}

template <typename T>
void AccumulateTyped(float* acc, bool resume, const void* const* sources, int num_sources,
                     size_t count) {
  int s = 0;
  if (!resume) {
    const T* first = static_cast<const T*>(sources[0]);
    for (size_t i = 0; i < count; ++i) acc[i] = Load(first + i);
    s = 1;
  }
  for (; s < num_sources; ++s) {
    const T* source = static_cast<const T*>(sources[s]);
    for (size_t i = 0; i < count; ++i) acc[i] += Load(source + i);
  }
}

}  // namespace

void AccumulateInRankOrder(float* acc, bool resume, const void* const* sources, int num_sources,
                           size_t count, DType dtype) {
  if (count == 0 || (num_sources <= 0 && resume)) return;
  if (dtype == DType::kF32) {
    AccumulateTyped<float>(acc, resume, sources, num_sources, count);
  } else {
    AccumulateTyped<bf16>(acc, resume, sources, num_sources, count);
  }
}

void StoreSums(const float* acc, void* out, size_t count, DType dtype) {
  if (dtype == DType::kF32) {
    std::memcpy(out, acc, count * sizeof(float));
    return;
  }
  bf16* typed = static_cast<bf16*>(out);
  for (size_t i = 0; i < count; ++i) Store(typed + i, acc[i]);
}

void SumInRankOrder(const void* const* sources, int num_sources, void* const* outputs,
                    int num_outputs, size_t count, DType dtype) {
  if (count == 0 || num_sources <= 0 || num_outputs <= 0) return;
  if (num_sources == 1) {
    // One rank: the sum is its input; an in-place output is already it (no pass over a
    // unit's whole gradient at the end of backward).
    for (int k = 0; k < num_outputs; ++k) {
      if (outputs[k] != sources[0]) std::memcpy(outputs[k], sources[0], count * DTypeBytes(dtype));
    }
    return;
  }
  if (dtype == DType::kF32) {
    SumTyped<float>(sources, num_sources, outputs, num_outputs, count);
  } else {
    SumTyped<bf16>(sources, num_sources, outputs, num_outputs, count);
  }
}

}  // namespace strata
