// CPU causal attention's fast versions (the references, their specification, are in
// attention_reference.cc, which follows llm.c's attention_forward one softmax row at a time
// and writes the backward out over a materialised [T,T] probability matrix per head). The
// fast version converts a head's keys and values to fp32 once per task (keys, and in the
// backward values, also transposed), so that every product is a small matrix product over
// contiguous rows, computed by one register-blocked micro-kernel (RowsTimesMatrix: 4 rows
// x 32 columns of accumulators, each loaded vector used 4 times):
//   S = (scale * Q) K^T, P = exp(S - stats) (causal), out = P V / rowsum,
//   dP = dout V^T, dS = P * (dP - D) with D_i = dout_i . out_i, dQ = scale * dS K,
//   dK += dS^T (scale * Q), dV += P^T dout.
// Thread-safety: see attention.h.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/cpu/elementwise.h"  // ExpApprox, STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

// Query rows per forward task: enough rows to amortise loading the keys they share.
constexpr int kForwardRows = 32;
// Query rows per backward block: the block's dS and P update dk_j and dv_j with the
// accumulators in registers, so each dk/dv row passes through memory once per block.
constexpr int kBackwardRows = 16;
// fp32 scratch rows are padded to a multiple of this many floats (one AVX-512 vector).
constexpr int kPad = 16;
// Rows per micro-kernel call: with 2 vectors per row, 8 independent accumulators.
constexpr int kMicroRows = 4;

inline int RoundUp(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// 16 floats: one AVX-512 register; 8 floats: one AVX2 register (two SSE ones). The
// micro-kernel runs on 16-float vectors where the CPU has AVX-512 and on 8-float ones
// elsewhere: GCC lowers a 16-float vector on AVX2 through the stack (every accumulator
// spilled on every k). aligned(4): loads and stores need not be aligned. Values of these
// types only pass between always_inline functions of this file, so GCC's warning that their
// calling convention differs without AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Floats16 __attribute__((vector_size(64), aligned(4)));
typedef float Floats8 __attribute__((vector_size(32), aligned(4)));

template <typename V>
inline __attribute__((always_inline)) V LoadFloats(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename V>
inline __attribute__((always_inline)) void StoreFloats(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}

// For r < R and m < M (M a multiple of kPad), on vectors V of L floats:
//   out[r * out_stride + m] (+)= sum_{k < K} a[r * a_row_stride + k * a_k_stride] *
//                                          matrix[k * stride + m]
// i.e. R rows of a (either layout) times a row-major K x M matrix; += with kAccumulate.
template <typename V, int R, bool kAccumulate>
inline __attribute__((always_inline)) void RowsTimesMatrixFixed(float* out, size_t out_stride,
                                                                const float* a, size_t a_row_stride,
                                                                size_t a_k_stride, int K,
                                                                const float* matrix, size_t stride,
                                                                int M) {
  constexpr int L = sizeof(V) / sizeof(float);
  int m = 0;
  for (; m + 2 * L <= M; m += 2 * L) {
    V acc[R][2];
    for (int r = 0; r < R; ++r) {
      acc[r][0] = kAccumulate ? LoadFloats<V>(out + r * out_stride + m) : V{};
      acc[r][1] = kAccumulate ? LoadFloats<V>(out + r * out_stride + m + L) : V{};
    }
    const float* row = matrix + m;
    const float* a_k = a;
    for (int k = 0; k < K; ++k, row += stride, a_k += a_k_stride) {
      const V b0 = LoadFloats<V>(row), b1 = LoadFloats<V>(row + L);
      for (int r = 0; r < R; ++r) {
        const float a_rk = a_k[r * a_row_stride];
        acc[r][0] += a_rk * b0;
        acc[r][1] += a_rk * b1;
      }
    }
    for (int r = 0; r < R; ++r) {
      StoreFloats<V>(out + r * out_stride + m, acc[r][0]);
      StoreFloats<V>(out + r * out_stride + m + L, acc[r][1]);
    }
  }
  for (; m < M; m += L) {  // one vector left (M is a multiple of kPad, so of L)
    V acc[R];
    for (int r = 0; r < R; ++r) {
      acc[r] = kAccumulate ? LoadFloats<V>(out + r * out_stride + m) : V{};
    }
    const float* row = matrix + m;
    const float* a_k = a;
    for (int k = 0; k < K; ++k, row += stride, a_k += a_k_stride) {
      const V b0 = LoadFloats<V>(row);
      for (int r = 0; r < R; ++r) acc[r] += a_k[r * a_row_stride] * b0;
    }
    for (int r = 0; r < R; ++r) StoreFloats<V>(out + r * out_stride + m, acc[r]);
  }
}

// RowsTimesMatrixFixed for any number of rows.
template <typename V, bool kAccumulate>
inline __attribute__((always_inline)) void RowsTimesMatrixOn(float* out, size_t out_stride,
                                                             const float* a, size_t a_row_stride,
                                                             size_t a_k_stride, int rows, int K,
                                                             const float* matrix, size_t stride,
                                                             int M) {
  int r = 0;
  for (; r + kMicroRows <= rows; r += kMicroRows) {
    RowsTimesMatrixFixed<V, kMicroRows, kAccumulate>(out + r * out_stride, out_stride,
                                                     a + r * a_row_stride, a_row_stride, a_k_stride,
                                                     K, matrix, stride, M);
  }
  float* out_r = out + r * out_stride;
  const float* a_r = a + r * a_row_stride;
  switch (rows - r) {
    case 3:
      RowsTimesMatrixFixed<V, 3, kAccumulate>(out_r, out_stride, a_r, a_row_stride, a_k_stride, K,
                                              matrix, stride, M);
      break;
    case 2:
      RowsTimesMatrixFixed<V, 2, kAccumulate>(out_r, out_stride, a_r, a_row_stride, a_k_stride, K,
                                              matrix, stride, M);
      break;
    case 1:
      RowsTimesMatrixFixed<V, 1, kAccumulate>(out_r, out_stride, a_r, a_row_stride, a_k_stride, K,
                                              matrix, stride, M);
      break;
    default:
      break;
  }
}

// SetAttentionVectorFloatsForTesting's choice (0: the CPU's).
std::atomic<int> forced_vector_floats{0};

// RowsTimesMatrixOn with the vectors this CPU holds in registers (see Floats8). Every
// output is the same sum in the same order either way.
template <bool kAccumulate>
inline __attribute__((always_inline)) void RowsTimesMatrix(float* out, size_t out_stride,
                                                           const float* a, size_t a_row_stride,
                                                           size_t a_k_stride, int rows, int K,
                                                           const float* matrix, size_t stride,
                                                           int M) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  const int forced = forced_vector_floats.load(std::memory_order_relaxed);
  if (forced != 0 ? forced == 16 : avx512) {
    RowsTimesMatrixOn<Floats16, kAccumulate>(out, out_stride, a, a_row_stride, a_k_stride, rows, K,
                                             matrix, stride, M);
  } else {
    RowsTimesMatrixOn<Floats8, kAccumulate>(out, out_stride, a, a_row_stride, a_k_stride, rows, K,
                                            matrix, stride, M);
  }
}

inline __attribute__((always_inline)) float MaxOf(const float* x, int n) {
  float lanes[kPad];
  for (int l = 0; l < kPad; ++l) lanes[l] = -INFINITY;
  int j = 0;
  for (; j + kPad <= n; j += kPad) {
    for (int l = 0; l < kPad; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  }
  float result = -INFINITY;
  for (int l = 0; l < kPad; ++l) result = lanes[l] > result ? lanes[l] : result;
  for (; j < n; ++j) result = x[j] > result ? x[j] : result;
  return result;
}

// x[j] = e^(x[j] - shift) for j < n; returns the sum of the new values.
inline __attribute__((always_inline)) float ExpInPlaceAndSum(float* x, int n, float shift) {
  float lanes[kPad] = {};
  int j = 0;
  for (; j + kPad <= n; j += kPad) {
    for (int l = 0; l < kPad; ++l) {
      const float p = ExpApprox(x[j + l] - shift);
      x[j + l] = p;
      lanes[l] += p;
    }
  }
  float sum = 0.0f;
  for (int l = 0; l < kPad; ++l) sum += lanes[l];
  for (; j < n; ++j) {
    x[j] = ExpApprox(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

// dst[j * dst_stride + d] = src[j * src_stride + d] * factor for j < rows, d < hs; zero for
// hs <= d < dst_stride.
template <typename Storage>
inline __attribute__((always_inline)) void LoadRows(float* dst, int dst_stride, const Storage* src,
                                                    size_t src_stride, int rows, int hs,
                                                    float factor = 1.0f) {
  for (int j = 0; j < rows; ++j) {
    float* dst_row = dst + static_cast<size_t>(j) * dst_stride;
    const Storage* src_row = src + j * src_stride;
    for (int d = 0; d < dst_stride; ++d) dst_row[d] = d < hs ? Load(src_row + d) * factor : 0.0f;
  }
}

// dst[d * dst_stride + j] = src[j * src_stride + d] for j < rows, d < hs; zero for
// rows <= j < dst_stride.
template <typename Storage>
void LoadRowsTransposed(float* dst, int dst_stride, const Storage* src, size_t src_stride, int rows,
                        int hs) {
  for (int j = 0; j < rows; ++j) {
    const Storage* src_row = src + j * src_stride;
    for (int d = 0; d < hs; ++d) dst[static_cast<size_t>(d) * dst_stride + j] = Load(src_row + d);
  }
  for (int d = 0; d < hs; ++d) {
    for (int j = rows; j < dst_stride; ++j) dst[static_cast<size_t>(d) * dst_stride + j] = 0.0f;
  }
}

// Query rows [row_begin, row_end) of one head's forward. keys_t: [hs][key_stride] fp32
// (zero beyond row_end); values: [row_end][hs_pad] fp32 (zero beyond hs).
// scratch: kMicroRows * (2 * hs_pad + key_stride).
template <typename Storage>
STRATA_CPU_SIMD_CLONES void ForwardRows(Storage* out, size_t out_stride, float* stats,
                                        const Storage* q, size_t q_stride, float scale,
                                        const float* keys_t, int key_stride, const float* values,
                                        int hs_pad, int hs, int row_begin, int row_end,
                                        float* scratch) {
  float* queries_scaled = scratch;                         // [kMicroRows][hs_pad]
  float* out_sums = queries_scaled + kMicroRows * hs_pad;  // [kMicroRows][hs_pad]
  float* probs = out_sums + kMicroRows * hs_pad;           // [kMicroRows][key_stride]
  for (int t0 = row_begin; t0 < row_end; t0 += kMicroRows) {
    const int rows = std::min(kMicroRows, row_end - t0);
    const int num_keys = t0 + rows;  // keys visible to the group's last row
    LoadRows(queries_scaled, hs_pad, q + t0 * q_stride, q_stride, rows, hs, scale);
    RowsTimesMatrix<false>(probs, key_stride, queries_scaled, hs_pad, 1, rows, hs, keys_t,
                           key_stride, RoundUp(num_keys, kPad));
    float inv_sums[kMicroRows];
    for (int r = 0; r < rows; ++r) {
      const int t = t0 + r;
      float* row = probs + r * key_stride;
      const float max_score = MaxOf(row, t + 1);
      const float sum = ExpInPlaceAndSum(row, t + 1, max_score);
      for (int j = t + 1; j < num_keys; ++j) row[j] = 0.0f;  // causal mask
      inv_sums[r] = 1.0f / sum;
      stats[t] = max_score + std::log(sum);
    }
    RowsTimesMatrix<false>(out_sums, hs_pad, probs, key_stride, 1, rows, num_keys, values, hs_pad,
                           hs_pad);
    for (int r = 0; r < rows; ++r) {
      Storage* out_row = out + (t0 + r) * out_stride;
      for (int d = 0; d < hs; ++d) Store(out_row + d, out_sums[r * hs_pad + d] * inv_sums[r]);
    }
  }
}

// One (batch, head) of the fast backward: where its inputs and outputs live, and the fp32
// scratch of the thread that runs it.
template <typename Storage>
struct HeadBackward {
  const Storage* qkv;   // row t of the head's q at qkv + t * qkv_stride
  Storage* dqkv;        // same layout (the head's dq)
  const Storage* out;   // row t at out + t * out_stride
  const Storage* dout;  // same layout
  const float* stats;   // [T]: log-sum-exp of each softmax row
  size_t qkv_stride, out_stride;
  int hs, hs_pad, T_pad;
  float scale;
  const float* keys_t;    // [hs][T_pad], zero beyond T
  const float* values_t;  // [hs][T_pad], zero beyond T
  const float* keys;      // [T][hs_pad], zero beyond hs
  float* dkeys;           // [T][hs_pad] fp32 sums of dk
  float* dvalues;         // [T][hs_pad] fp32 sums of dv
  float* queries_scaled;  // [kBackwardRows][hs_pad]: scale * q of the block's rows
  float* dout_rows;       // [kBackwardRows][hs_pad]
  float* dq_sums;         // [kBackwardRows][hs_pad]
  float* probs;           // [kBackwardRows][T_pad]: p_ij, 0 for j > i
  float* dscores;         // [kBackwardRows][T_pad]: ds_ij, 0 for j > i
};

// Query rows [row_begin, row_end) of one head: adds their dq to dqkv, and their
// contributions to dk_j, dv_j (j < row_end) to the fp32 dkeys, dvalues.
template <typename Storage>
STRATA_CPU_SIMD_CLONES void BackwardRows(const HeadBackward<Storage>& head, int row_begin,
                                         int row_end) {
  const int hs = head.hs, hs_pad = head.hs_pad, T_pad = head.T_pad;
  const int rows = row_end - row_begin;
  const int keys_padded = RoundUp(row_end, kPad);
  LoadRows(head.queries_scaled, hs_pad, head.qkv + row_begin * head.qkv_stride, head.qkv_stride,
           rows, hs, head.scale);
  LoadRows(head.dout_rows, hs_pad, head.dout + row_begin * head.out_stride, head.out_stride, rows,
           hs);
  RowsTimesMatrix<false>(head.probs, T_pad, head.queries_scaled, hs_pad, 1, rows, hs, head.keys_t,
                         T_pad, keys_padded);
  RowsTimesMatrix<false>(head.dscores, T_pad, head.dout_rows, hs_pad, 1, rows, hs, head.values_t,
                         T_pad, keys_padded);
  for (int r = 0; r < rows; ++r) {
    const int t = row_begin + r;
    const float* dout_row = head.dout_rows + r * hs_pad;
    const Storage* out = head.out + t * head.out_stride;
    float out_dot_dout = 0.0f;  // D_t = sum_j p_tj dp_tj = dout_t . out_t
    for (int d = 0; d < hs; ++d) out_dot_dout += dout_row[d] * Load(out + d);
    const float log_sum_exp = head.stats[t];
    float* probs = head.probs + r * T_pad;
    float* dscores = head.dscores + r * T_pad;
    for (int j = 0; j < keys_padded; ++j) {
      const float p = j <= t ? ExpApprox(probs[j] - log_sum_exp) : 0.0f;  // causal mask
      probs[j] = p;
      dscores[j] = p * (dscores[j] - out_dot_dout);
    }
  }
  // dQ = scale * dS K.
  RowsTimesMatrix<false>(head.dq_sums, hs_pad, head.dscores, T_pad, 1, rows, row_end, head.keys,
                         hs_pad, hs_pad);
  for (int r = 0; r < rows; ++r) {
    Storage* dq = head.dqkv + (row_begin + r) * head.qkv_stride;
    const float* dq_sum = head.dq_sums + r * hs_pad;
    for (int d = 0; d < hs; ++d) Store(dq + d, Load(dq + d) + dq_sum[d] * head.scale);
  }
  // dK += dS^T (scale * Q) and dV += P^T dout: rows of the output are keys j, the sum runs
  // over the block's query rows, so a (dS or P) is read down its columns.
  RowsTimesMatrix<true>(head.dkeys, hs_pad, head.dscores, 1, T_pad, row_end, rows,
                        head.queries_scaled, hs_pad, hs_pad);
  RowsTimesMatrix<true>(head.dvalues, hs_pad, head.probs, 1, T_pad, row_end, rows, head.dout_rows,
                        hs_pad, hs_pad);
}

}  // namespace

template <typename Storage>
void AttentionForward(Storage* out, float* stats, const Storage* qkv, int B, int T, int C, int NH,
                      int NKV) {
  const int hs = C / NH, group = NH / NKV;
  const int hs_pad = RoundUp(hs, kPad);
  const int T_pad = RoundUp(T, kPad);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t row = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const size_t v_offset = static_cast<size_t>(C) + static_cast<size_t>(NKV) * hs;
  const int num_blocks = (T + kForwardRows - 1) / kForwardRows;
  const int num_tasks = B * NH * num_blocks;
#pragma omp parallel if (num_tasks > 1)
  {
    std::vector<float> keys_t(static_cast<size_t>(hs) * T_pad);
    std::vector<float> values(static_cast<size_t>(T) * hs_pad);
    std::vector<float> scratch(kMicroRows * (2 * hs_pad + T_pad));
    // Tasks of one (b, h) run from the last row block (most keys) to the first, so that
    // dynamic scheduling ends with small tasks.
#pragma omp for schedule(dynamic)
    for (int task = 0; task < num_tasks; ++task) {
      const int block = num_blocks - 1 - task % num_blocks;
      const int bh = task / num_blocks;
      const int b = bh / NH, h = bh % NH, g = h / group;
      const int row_begin = block * kForwardRows;
      const int row_end = std::min(T, row_begin + kForwardRows);
      const int key_stride = RoundUp(row_end, kPad);  // keys 0..row_end-1 are visible
      const Storage* qkv_b = qkv + static_cast<size_t>(b) * T * row;
      LoadRowsTransposed(keys_t.data(), key_stride, qkv_b + C + g * hs, row, row_end, hs);
      LoadRows(values.data(), hs_pad, qkv_b + v_offset + g * hs, row, row_end, hs);
      ForwardRows(out + static_cast<size_t>(b) * T * C + h * hs, C,
                  stats + static_cast<size_t>(bh) * T, qkv_b + h * hs, row, scale, keys_t.data(),
                  key_stride, values.data(), hs_pad, hs, row_begin, row_end, scratch.data());
    }
  }
}

template <typename Storage>
void AttentionBackward(Storage* dqkv, const Storage* dout, const Storage* qkv, const Storage* out,
                       const float* stats, int B, int T, int C, int NH, int NKV) {
  const int hs = C / NH, group = NH / NKV;
  const int hs_pad = RoundUp(hs, kPad);
  const int T_pad = RoundUp(T, kPad);
  const size_t row = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const size_t v_offset = static_cast<size_t>(C) + static_cast<size_t>(NKV) * hs;
  // One task per (batch, key/value head): it runs the query heads sharing that head in
  // order, summing their dk, dv in fp32 before one store, and owns every element it writes.
  const int num_tasks = B * NKV;
#pragma omp parallel if (num_tasks > 1)
  {
    const size_t head_floats = static_cast<size_t>(T) * hs_pad;
    const size_t block_floats = static_cast<size_t>(kBackwardRows) * T_pad;
    std::vector<float> keys_t(static_cast<size_t>(hs) * T_pad), values_t(keys_t.size());
    std::vector<float> keys(head_floats), dkeys(head_floats), dvalues(head_floats);
    std::vector<float> block_rows(3 * kBackwardRows * hs_pad);
    std::vector<float> block_scores(2 * block_floats);
    HeadBackward<Storage> head;
    head.qkv_stride = row;
    head.out_stride = C;
    head.hs = hs;
    head.hs_pad = hs_pad;
    head.T_pad = T_pad;
    head.scale = 1.0f / std::sqrt(static_cast<float>(hs));
    head.keys_t = keys_t.data();
    head.values_t = values_t.data();
    head.keys = keys.data();
    head.dkeys = dkeys.data();
    head.dvalues = dvalues.data();
    head.queries_scaled = block_rows.data();
    head.dout_rows = head.queries_scaled + kBackwardRows * hs_pad;
    head.dq_sums = head.dout_rows + kBackwardRows * hs_pad;
    head.probs = block_scores.data();
    head.dscores = head.probs + block_floats;
#pragma omp for schedule(dynamic)
    for (int task = 0; task < num_tasks; ++task) {
      const int b = task / NKV, g = task % NKV;
      const Storage* qkv_b = qkv + static_cast<size_t>(b) * T * row;
      Storage* dqkv_b = dqkv + static_cast<size_t>(b) * T * row;
      LoadRowsTransposed(keys_t.data(), T_pad, qkv_b + C + g * hs, row, T, hs);
      LoadRowsTransposed(values_t.data(), T_pad, qkv_b + v_offset + g * hs, row, T, hs);
      LoadRows(keys.data(), hs_pad, qkv_b + C + g * hs, row, T, hs);
      std::fill(dkeys.begin(), dkeys.end(), 0.0f);
      std::fill(dvalues.begin(), dvalues.end(), 0.0f);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const size_t out_offset = static_cast<size_t>(b) * T * C + h * hs;
        head.qkv = qkv_b + h * hs;
        head.dqkv = dqkv_b + h * hs;
        head.out = out + out_offset;
        head.dout = dout + out_offset;
        head.stats = stats + (static_cast<size_t>(b) * NH + h) * T;
        for (int row_begin = 0; row_begin < T; row_begin += kBackwardRows) {
          BackwardRows(head, row_begin, std::min(T, row_begin + kBackwardRows));
        }
      }
      for (int t = 0; t < T; ++t) {
        Storage* dk = dqkv_b + t * row + C + g * hs;
        Storage* dv = dqkv_b + t * row + v_offset + g * hs;
        const float* dk_sum = dkeys.data() + static_cast<size_t>(t) * hs_pad;
        const float* dv_sum = dvalues.data() + static_cast<size_t>(t) * hs_pad;
        for (int d = 0; d < hs; ++d) {
          Store(dk + d, Load(dk + d) + dk_sum[d]);
          Store(dv + d, Load(dv + d) + dv_sum[d]);
        }
      }
    }
  }
}

template <typename Storage>
void AttentionDecode(Storage* out, const Storage* qkv, int T, int C, int NH, int NKV) {
  const int hs = C / NH, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t row = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const size_t v_offset = static_cast<size_t>(C) + static_cast<size_t>(NKV) * hs;
#pragma omp parallel if (NH > 1)
  {
    std::vector<float> att(T), sums(hs);
#pragma omp for schedule(static)
    for (int h = 0; h < NH; ++h) {
      const int g = h / group;
      const Storage* query = qkv + static_cast<size_t>(T - 1) * row + h * hs;
      float max_score = -INFINITY;
      for (int t = 0; t < T; ++t) {
        const Storage* key = qkv + static_cast<size_t>(t) * row + C + g * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; ++i) dot += Load(query + i) * Load(key + i);
        att[t] = dot * scale;
        max_score = std::max(max_score, att[t]);
      }
      const float exp_sum = ExpInPlaceAndSum(att.data(), T, max_score);
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (int t = 0; t < T; ++t) {
        const Storage* value = qkv + static_cast<size_t>(t) * row + v_offset + g * hs;
        const float p = att[t];
        for (int i = 0; i < hs; ++i) sums[i] += p * Load(value + i);
      }
      for (int i = 0; i < hs; ++i) Store(out + h * hs + i, sums[i] / exp_sum);
    }
  }
}

#define STRATA_INSTANTIATE(S)                                                                  \
  template void AttentionForward<S>(S*, float*, const S*, int, int, int, int, int);            \
  template void AttentionBackward<S>(S*, const S*, const S*, const S*, const float*, int, int, \
                                     int, int, int);                                           \
  template void AttentionDecode<S>(S*, const S*, int, int, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

void SetAttentionVectorFloatsForTesting(int floats) {
  forced_vector_floats.store(floats, std::memory_order_relaxed);
}

}  // namespace strata::cpu
