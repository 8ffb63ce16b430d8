// CPU copies of attention heads between a qkv buffer and rows of their own (kernels/ops.h
// CopyHeads): qkv is [N, heads_per_row * hs] (LLaMA's (q: NH | k: NKV | v: NKV) heads of hs);
// rows is [N * count, hs], holding heads [first, first + count) of each qkv row, row n's
// head first + j at rows[(n * count + j) * hs]. to_rows copies qkv -> rows, else rows -> qkv
// (the other heads of qkv untouched). Exact: a copy of the stored values. So a per-head
// operation over contiguous rows (Qwen3's q/k RMSNorm) runs on the heads of a qkv buffer.
// The reference is the specification; the fast version splits tokens across OpenMP threads.
// Thread-safety: reentrant; the fast version runs an OpenMP region on the calling thread's pool.
#pragma once

#include "core/dtype.h"

namespace strata::cpu {

template <typename T>
void CopyHeadsReference(T* qkv, T* rows, int N, int heads_per_row, int first, int count, int hs,
                        bool to_rows);
template <typename T>
void CopyHeads(T* qkv, T* rows, int N, int heads_per_row, int first, int count, int hs,
               bool to_rows);

}  // namespace strata::cpu
