// CPU AdamW reference: one scalar update per element (AdamUpdate) in a plain loop, with the
// per-step constants of kernels/adam_math.h.
// Thread-safety: see adamw.h.
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "kernels/adam_math.h"
#include "kernels/cpu/elementwise.h"  // Store

namespace strata::cpu {
namespace {

template <typename T>
inline __attribute__((always_inline)) void AdamUpdate(T* param, float* master, const float* grad,
                                                      float* m, float* v, size_t i,
                                                      const AdamConstants& k) {
  const float g = grad[i] * k.grad_scale;
  const float m_new = k.beta1 * m[i] + k.one_minus_beta1 * g;
  const float v_new = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
  const float m_hat = m_new / k.bias_correction1;
  const float v_hat = v_new / k.bias_correction2;
  const float p = master[i];
  const float p_new = p - k.lr * (m_hat / (std::sqrt(v_hat) + k.eps) + k.weight_decay * p);
  m[i] = m_new;
  v[i] = v_new;
  master[i] = p_new;
  if (param != nullptr) Store(param + i, p_new);
}

}  // namespace

template <typename T>
void AdamWReference(T* param, float* master, const float* grad, float* m, float* v, size_t n,
                    const AdamParams& hp) {
  const AdamConstants k = MakeAdamConstants(hp);
  for (size_t i = 0; i < n; ++i) AdamUpdate(param, master, grad, m, v, i, k);
}

#define STRATA_INSTANTIATE(T)                                                       \
  template void AdamWReference<T>(T*, float*, const float*, float*, float*, size_t, \
                                  const AdamParams&);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
