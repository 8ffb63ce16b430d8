// CPU token + position embedding (GPT-2's encoder): a plain reference (the specification)
// and a fast version (OpenMP, vectorised rows with run-time ISA choice). The template
// parameter `Storage` is float or bf16 (named so because T is the sequence length here);
// arithmetic is fp32.
//
// Shapes: tokens [B,T] int32 with 0 <= token < V (not checked: V is not passed), wte [V,C],
// wpe [maxT,C] with T <= maxT, out and dout [B,T,C]. wpe (forward) and dwpe (backward) may
// be null: no position embedding (LLaMA), out = the token rows.
// Backward ACCUMULATES (+=) into dwte and dwpe. Each touched row of dwte and each row of
// dwpe gets the fp32 sum of its contributions, taken in (b, t) order starting from the
// stored value, and is stored once; the fast version uses the same order, so both give
// bit-identical results, independent of the thread count.
// Thread-safety: reentrant; fast versions run an OpenMP region on the calling thread's pool.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
template <typename Storage>
void EncoderForwardReference(Storage* out, const int32_t* tokens, const Storage* wte,
                             const Storage* wpe, int B, int T, int C);
template <typename Storage>
void EncoderForward(Storage* out, const int32_t* tokens, const Storage* wte, const Storage* wpe,
                    int B, int T, int C);

// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]
template <typename Storage>
void EncoderBackwardReference(Storage* dwte, Storage* dwpe, const Storage* dout,
                              const int32_t* tokens, int B, int T, int C);
template <typename Storage>
void EncoderBackward(Storage* dwte, Storage* dwpe, const Storage* dout, const int32_t* tokens,
                     int B, int T, int C);

}  // namespace strata::cpu
