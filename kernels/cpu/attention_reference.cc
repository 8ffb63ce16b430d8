// CPU causal attention's references (declared in attention.h): the specification the fast
// versions of attention.cc are tested against. The forward follows llm.c's
// attention_forward (one softmax row at a time, std::exp); the backward is written out in
// matrix form over a materialised [T,T] probability matrix per head and recomputes
// everything from qkv; the decode is the forward's last row. Plain scalar loops in one
// thread, compiled with the kernel's flags (cpu_kernel), in the same library as the fast
// versions.
// Thread-safety: reentrant; no shared state.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"  // Load, Store

namespace strata::cpu {

template <typename Storage>
void AttentionForwardReference(Storage* out, float* stats, const Storage* qkv, int B, int T, int C,
                               int NH, int NKV) {
  const int hs = C / NH, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t row = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const size_t v_offset = static_cast<size_t>(C) + static_cast<size_t>(NKV) * hs;
  std::vector<float> att(T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH; ++h) {
        const int g = h / group;  // the key/value head of query head h
        const Storage* query = qkv + (static_cast<size_t>(b) * T + t) * row + h * hs;
        // Scaled scores against keys 0..t (causal), and their maximum for stability.
        float max_score = -INFINITY;
        for (int t2 = 0; t2 <= t; ++t2) {
          const Storage* key = qkv + (static_cast<size_t>(b) * T + t2) * row + C + g * hs;
          float dot = 0.0f;
          for (int i = 0; i < hs; ++i) dot += Load(query + i) * Load(key + i);
          att[t2] = dot * scale;
          max_score = std::max(max_score, att[t2]);
        }
        float exp_sum = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          att[t2] = std::exp(att[t2] - max_score);
          exp_sum += att[t2];
        }
        for (int t2 = 0; t2 <= t; ++t2) att[t2] /= exp_sum;
        // The probability-weighted sum of the values.
        Storage* out_bth = out + (static_cast<size_t>(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) {
          float sum = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) {
            const Storage* value =
                qkv + (static_cast<size_t>(b) * T + t2) * row + v_offset + g * hs;
            sum += att[t2] * Load(value + i);
          }
          Store(out_bth + i, sum);
        }
        stats[(static_cast<size_t>(b) * NH + h) * T + t] = max_score + std::log(exp_sum);
      }
    }
  }
}

template <typename Storage>
void AttentionBackwardReference(Storage* dqkv, const Storage* dout, const Storage* qkv,
                                const Storage* /*out*/, const float* /*stats*/, int B, int T, int C,
                                int NH, int NKV) {
  const int hs = C / NH, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t row_size = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const size_t v_offset = static_cast<size_t>(C) + static_cast<size_t>(NKV) * hs;
  // Per head: probabilities P [T,T] (row t: query t) and fp32 gradients of q [T,hs]; per
  // key/value head: fp32 gradients of k, v [T,hs], summed over the query heads that share it.
  std::vector<float> P(static_cast<size_t>(T) * T), dP(T);
  std::vector<float> dq(static_cast<size_t>(T) * hs), dk(dq.size()), dv(dq.size());
  for (int b = 0; b < B; ++b) {
    for (int g = 0; g < NKV; ++g) {
      auto k = [&](int t, int i) {
        return Load(qkv + (size_t(b) * T + t) * row_size + C + g * hs + i);
      };
      auto v = [&](int t, int i) {
        return Load(qkv + (size_t(b) * T + t) * row_size + v_offset + g * hs + i);
      };
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        auto q = [&](int t, int i) {
          return Load(qkv + (size_t(b) * T + t) * row_size + h * hs + i);
        };
        auto d_out = [&](int t, int i) {
          return Load(dout + (size_t(b) * T + t) * C + h * hs + i);
        };

        // Recompute the forward's probabilities (causal softmax of scaled scores).
        std::fill(P.begin(), P.end(), 0.0f);
        for (int t = 0; t < T; ++t) {
          float* row = &P[size_t(t) * T];
          float max_score = -INFINITY;
          for (int t2 = 0; t2 <= t; ++t2) {
            float dot = 0.0f;
            for (int i = 0; i < hs; ++i) dot += q(t, i) * k(t2, i);
            row[t2] = dot * scale;
            max_score = std::max(max_score, row[t2]);
          }
          float exp_sum = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) {
            row[t2] = std::exp(row[t2] - max_score);
            exp_sum += row[t2];
          }
          for (int t2 = 0; t2 <= t; ++t2) row[t2] /= exp_sum;
        }

        std::fill(dq.begin(), dq.end(), 0.0f);
        for (int t = 0; t < T; ++t) {
          const float* row = &P[size_t(t) * T];
          // out_t = sum_t2 P[t,t2] v_t2, so dP[t,t2] = dout_t . v_t2 and dv_t2 += P[t,t2] dout_t.
          for (int t2 = 0; t2 <= t; ++t2) {
            float dot = 0.0f;
            for (int i = 0; i < hs; ++i) dot += d_out(t, i) * v(t2, i);
            dP[t2] = dot;
            for (int i = 0; i < hs; ++i) dv[size_t(t2) * hs + i] += row[t2] * d_out(t, i);
          }
          // Softmax: dS[t,t2] = P[t,t2] * (dP[t,t2] - sum_t3 P[t,t3] dP[t,t3]).
          float row_dot = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) row_dot += row[t2] * dP[t2];
          // S[t,t2] = scale * q_t . k_t2.
          for (int t2 = 0; t2 <= t; ++t2) {
            const float dS = row[t2] * (dP[t2] - row_dot);
            for (int i = 0; i < hs; ++i) {
              dq[size_t(t) * hs + i] += scale * dS * k(t2, i);
              dk[size_t(t2) * hs + i] += scale * dS * q(t, i);
            }
          }
        }
        for (int t = 0; t < T; ++t) {
          Storage* dq_t = dqkv + (size_t(b) * T + t) * row_size + h * hs;
          for (int i = 0; i < hs; ++i) Store(dq_t + i, Load(dq_t + i) + dq[size_t(t) * hs + i]);
        }
      }
      for (int t = 0; t < T; ++t) {
        Storage* dk_t = dqkv + (size_t(b) * T + t) * row_size + C + g * hs;
        Storage* dv_t = dqkv + (size_t(b) * T + t) * row_size + v_offset + g * hs;
        for (int i = 0; i < hs; ++i) {
          Store(dk_t + i, Load(dk_t + i) + dk[size_t(t) * hs + i]);
          Store(dv_t + i, Load(dv_t + i) + dv[size_t(t) * hs + i]);
        }
      }
    }
  }
}

template <typename Storage>
void AttentionDecodeReference(Storage* out, const Storage* qkv, int T, int C, int NH, int NKV) {
  const int hs = C / NH, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t row = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const size_t v_offset = static_cast<size_t>(C) + static_cast<size_t>(NKV) * hs;
  std::vector<float> att(T);
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
    float exp_sum = 0.0f;
    for (int t = 0; t < T; ++t) {
      att[t] = std::exp(att[t] - max_score);
      exp_sum += att[t];
    }
    for (int i = 0; i < hs; ++i) {
      float sum = 0.0f;
      for (int t = 0; t < T; ++t) {
        sum += att[t] * Load(qkv + static_cast<size_t>(t) * row + v_offset + g * hs + i);
      }
      Store(out + h * hs + i, sum / exp_sum);
    }
  }
}

#define STRATA_INSTANTIATE(S)                                                                      \
  template void AttentionForwardReference<S>(S*, float*, const S*, int, int, int, int, int);       \
  template void AttentionBackwardReference<S>(S*, const S*, const S*, const S*, const float*, int, \
                                              int, int, int, int);                                 \
  template void AttentionDecodeReference<S>(S*, const S*, int, int, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
