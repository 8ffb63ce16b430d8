// The per-step scalars of AdamW, in one place for every implementation: the reference
// (kernels/cpu/adamw.cc), the SIMD CPU Adam (kernels/cpu/cpu_adam.cc) and the CUDA kernel
// (kernels/cuda/adamw.cu). Their results agree bit for bit only if each derives the same fp32
// constants from AdamParams, so none computes its own.
//
// Invariants: the bias corrections c = 1 - beta^step are computed in double and rounded once
// to fp32; 1 - beta is computed in fp32. Both happen once per step on the host, never in
// device code, because CUDA's device pow need not give the host's bits: the CUDA launcher
// passes AdamConstants to its kernel by value. The per-element update stays in each
// implementation (its arithmetic is tied to its own compiler flags or intrinsics; see
// kernels/cpu/adamw.h for the formula).
// Thread-safety: pure functions.
#pragma once

#include <cmath>

#include "kernels/ops.h"  // AdamParams

namespace strata {

// The fp32 constants of one AdamW step, as the per-element update reads them.
struct AdamConstants {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;
};

// 1 - beta^step in double, rounded once to fp32. step >= 1.
inline float AdamBiasCorrection(float beta, int step) {
  return static_cast<float>(1.0 - std::pow(double{beta}, step));
}

inline AdamConstants MakeAdamConstants(const AdamParams& hp) {
  AdamConstants k;
  k.lr = hp.lr;
  k.beta1 = hp.beta1;
  k.beta2 = hp.beta2;
  k.one_minus_beta1 = 1.0f - hp.beta1;
  k.one_minus_beta2 = 1.0f - hp.beta2;
  k.eps = hp.eps;
  k.weight_decay = hp.weight_decay;
  k.grad_scale = hp.grad_scale;
  k.bias_correction1 = AdamBiasCorrection(hp.beta1, hp.step);
  k.bias_correction2 = AdamBiasCorrection(hp.beta2, hp.step);
  return k;
}

}  // namespace strata
