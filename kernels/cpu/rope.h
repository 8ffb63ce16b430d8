// CPU rotary position embedding (kernels/ops.h RopeForward/RopeBackward), Hugging Face's
// "rotate half" layout, in place on the q and k heads of a qkv buffer [B,T,(NH+2*NKV)*hs]:
// for i < hs/2 the pair (x_i, x_{i+hs/2}) of the token at position p = position0 + t turns
// by the angle p * inv_freq_i (core/rope.h: theta^(-2i/hs), scaled as the spec says):
//   x_i' = x_i cos - x_{i+hs/2} sin,   x_{i+hs/2}' = x_{i+hs/2} cos + x_i sin.
// The backward turns dqkv by the negative angle (a rotation's inverse is its transpose).
// The angles are computed as Hugging Face does in fp32 (inv_freq in fp32, p * inv_freq in
// fp32, then cos and sin), in a [T, hs/2] table per call; arithmetic is fp32, storage
// `Storage` float or bf16 (rounded once per element). hs must be even.
// The reference is the specification; the fast version splits (b, t) rows across OpenMP
// threads; its SIMD clones may fuse a multiply and an add, so results can differ from the
// reference's in the last fp32 bit.
// Thread-safety: reentrant; the fast version runs an OpenMP region on the calling thread's pool.
#pragma once

#include <vector>

#include "core/dtype.h"
#include "core/rope.h"

namespace strata::cpu {

// cos and sin of the angles, [T][hs/2] each, for positions position0 .. position0+T-1.
void RopeTable(std::vector<float>& cos_table, std::vector<float>& sin_table, int T, int hs,
               const RopeSpec& rope, int position0);

// direction +1: forward rotation; -1: the backward's inverse rotation.
template <typename Storage>
void RopeReference(Storage* qkv, int B, int T, int NH, int NKV, int hs, const RopeSpec& rope,
                   int position0, int direction);
template <typename Storage>
void Rope(Storage* qkv, int B, int T, int NH, int NKV, int hs, const RopeSpec& rope, int position0,
          int direction);

}  // namespace strata::cpu
