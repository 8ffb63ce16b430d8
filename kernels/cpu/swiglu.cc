// CPU SwiGLU; see swiglu.h.
#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <cstddef>

#include "kernels/cpu/elementwise.h"  // ExpApprox, STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

template <typename T>
STRATA_CPU_SIMD_CLONES void ForwardRow(T* out, const T* gate, const T* up, int F) {
  for (int i = 0; i < F; ++i) {
    const float g = Load(gate + i);
    const float sigmoid = 1.0f / (1.0f + ExpApprox(-g));
    Store(out + i, g * sigmoid * Load(up + i));
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void BackwardRow(T* dgate, T* dup, const T* gate, const T* up,
                                        const T* dout, int F) {
  for (int i = 0; i < F; ++i) {
    const float g = Load(gate + i), u = Load(up + i), d = Load(dout + i);
    const float sigmoid = 1.0f / (1.0f + ExpApprox(-g));
    const float silu = g * sigmoid;
    Store(dgate + i, Load(dgate + i) + d * u * sigmoid * (1.0f + g * (1.0f - sigmoid)));
    Store(dup + i, Load(dup + i) + d * silu);
  }
}

}  // namespace

template <typename T>
void SwiGluForwardReference(T* out, const T* inp, int N, int F) {
  for (int n = 0; n < N; ++n) {
    const T* gate = inp + static_cast<size_t>(n) * 2 * F;
    const T* up = gate + F;
    for (int i = 0; i < F; ++i) {
      const float g = Load(gate + i);
      const float silu = g / (1.0f + std::exp(-g));
      Store(out + static_cast<size_t>(n) * F + i, silu * Load(up + i));
    }
  }
}

template <typename T>
void SwiGluBackwardReference(T* dinp, const T* inp, const T* dout, int N, int F) {
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * 2 * F;
    for (int i = 0; i < F; ++i) {
      const float g = Load(inp + row + i), u = Load(inp + row + F + i);
      const float d = Load(dout + static_cast<size_t>(n) * F + i);
      const float sigmoid = 1.0f / (1.0f + std::exp(-g));
      // d silu/dg = sigmoid + g * sigmoid * (1 - sigmoid)
      const float dsilu = sigmoid * (1.0f + g * (1.0f - sigmoid));
      Store(dinp + row + i, Load(dinp + row + i) + d * u * dsilu);
      Store(dinp + row + F + i, Load(dinp + row + F + i) + d * g * sigmoid);
    }
  }
}

template <typename T>
void SwiGluForward(T* out, const T* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (N > 1)
  for (int n = 0; n < N; ++n) {
    const T* gate = inp + static_cast<size_t>(n) * 2 * F;
    ForwardRow(out + static_cast<size_t>(n) * F, gate, gate + F, F);
  }
}

template <typename T>
void SwiGluBackward(T* dinp, const T* inp, const T* dout, int N, int F) {
#pragma omp parallel for schedule(static) if (N > 1)
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * 2 * F;
    BackwardRow(dinp + row, dinp + row + F, inp + row, inp + row + F,
                dout + static_cast<size_t>(n) * F, F);
  }
}

#define STRATA_INSTANTIATE(T)                                                         \
  template void SwiGluForwardReference<T>(T*, const T*, int, int);                    \
  template void SwiGluForward<T>(T*, const T*, int, int);                             \
  template void SwiGluBackwardReference<T>(T*, const T*, const T*, int, int);         \
  template void SwiGluBackward<T>(T*, const T*, const T*, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
