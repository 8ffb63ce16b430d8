// CPU causal multi-head self-attention: a plain reference (the specification, which
// materialises softmax rows and, in the backward, the full [T,T] probability matrix of a
// head) and a fast, memory-efficient version in the style of flash attention: the forward
// keeps nothing but the per-row log-sum-exp `stats`, and the backward recomputes the
// probabilities from q, k and stats. The template parameter `Storage` is float or bf16
// (named so because T is the sequence length here); arithmetic is fp32.
//
// Shapes as kernels/ops.h: grouped-query attention with NH query heads and NKV key/value
// heads (NH % NKV == 0; NKV == NH is GPT-2's multi-head attention). qkv [B,T,C + 2*NKV*hs]
// = (q: NH heads | k: NKV heads | v: NKV heads), hs = C/NH (C % NH == 0), query head h
// attends with key/value head h / (NH/NKV); scale 1/sqrt(hs); out and dout [B,T,C]; stats
// [B,NH,T] fp32 with stats = log(sum_{j<=i} exp(scale * q_i.k_j)), so the probabilities are
// p_ij = exp(scale * q_i.k_j - stats_i) for j <= i and 0 above.
// Backward ACCUMULATES (+=) into dqkv; each element gets its full fp32 gradient added to
// the stored value once. The reference backward recomputes everything from qkv and does not
// read `out` or `stats`; the fast one needs both (D_i = dout_i . out_i replaces a row sum
// over the [T,T] matrix).
// dk and dv of a key/value head are summed in fp32 over the query heads that share it, in
// head order, and added once. The fast forward runs (batch, head, 32-row block) tasks in
// parallel; the fast backward runs (batch, key/value head) tasks, each owning its group's
// slices of dqkv (so no two threads write the same element, and the result does not depend
// on the thread count). Scratch per
// thread: O(T * hs) floats.
// The fast versions are in attention.cc, the references in attention_reference.cc.
// Thread-safety: reentrant; fast versions run an OpenMP region on the calling thread's pool.
#pragma once

#include "core/dtype.h"

namespace strata::cpu {

template <typename Storage>
void AttentionForwardReference(Storage* out, float* stats, const Storage* qkv, int B, int T, int C,
                               int NH, int NKV);
template <typename Storage>
void AttentionForward(Storage* out, float* stats, const Storage* qkv, int B, int T, int C, int NH,
                      int NKV);

template <typename Storage>
void AttentionBackwardReference(Storage* dqkv, const Storage* dout, const Storage* qkv,
                                const Storage* out, const float* stats, int B, int T, int C,
                                int NH, int NKV);
template <typename Storage>
void AttentionBackward(Storage* dqkv, const Storage* dout, const Storage* qkv, const Storage* out,
                       const float* stats, int B, int T, int C, int NH, int NKV);

// Tests only: the fast versions' micro-kernel on vectors of `floats` floats (16: AVX-512's,
// 8: AVX2's); 0 (the default) picks by the CPU. Every output is the same either way.
void SetAttentionVectorFloatsForTesting(int floats);

// The attention of row T-1's query over keys 0..T-1 of one sequence (kernels/ops.h
// AttentionDecode): out [C]. The reference is the specification; the fast version runs the
// heads in parallel with ExpApprox. Both equal the last row of AttentionForward.
template <typename Storage>
void AttentionDecodeReference(Storage* out, const Storage* qkv, int T, int C, int NH, int NKV);
template <typename Storage>
void AttentionDecode(Storage* out, const Storage* qkv, int T, int C, int NH, int NKV);

}  // namespace strata::cpu
