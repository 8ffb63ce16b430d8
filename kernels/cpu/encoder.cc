// CPU encoder kernels. The backward is a scatter-add (several positions may share a token),
// so the fast version first groups positions by token (a stable sort keeps (b, t) order
// within a group) and then gives each token row to one thread: no atomics, no races, and
// the same summation order as the reference. Position rows are independent per t.
// Thread-safety: see encoder.h.
#include "kernels/cpu/encoder.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <numeric>
#include <vector>

#include "kernels/cpu/elementwise.h"  // STRATA_CPU_SIMD_CLONES

namespace strata::cpu {
namespace {

template <typename Storage>
STRATA_CPU_SIMD_CLONES void AddRows(Storage* out, const Storage* a, const Storage* b, int C) {
  for (int i = 0; i < C; ++i) Store(out + i, Load(a + i) + Load(b + i));
}

template <typename Storage>
STRATA_CPU_SIMD_CLONES void LoadRow(float* out, const Storage* row, int C) {
  for (int i = 0; i < C; ++i) out[i] = Load(row + i);
}

template <typename Storage>
STRATA_CPU_SIMD_CLONES void AddRowToFloat(float* sum, const Storage* row, int C) {
  for (int i = 0; i < C; ++i) sum[i] += Load(row + i);
}

template <typename Storage>
STRATA_CPU_SIMD_CLONES void StoreRow(Storage* row, const float* values, int C) {
  for (int i = 0; i < C; ++i) Store(row + i, values[i]);
}

}  // namespace

template <typename Storage>
void EncoderForwardReference(Storage* out, const int32_t* tokens, const Storage* wte,
                             const Storage* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      Storage* out_bt = out + (static_cast<size_t>(b) * T + t) * C;
      const Storage* wte_token = wte + static_cast<size_t>(tokens[b * T + t]) * C;
      if (wpe == nullptr) {
        for (int i = 0; i < C; ++i) Store(out_bt + i, Load(wte_token + i));
        continue;
      }
      const Storage* wpe_t = wpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; ++i) Store(out_bt + i, Load(wte_token + i) + Load(wpe_t + i));
    }
  }
}

template <typename Storage>
void EncoderBackwardReference(Storage* dwte, Storage* dwpe, const Storage* dout,
                              const int32_t* tokens, int B, int T, int C) {
  // fp32 sums per parameter row, started from the stored gradient, in (b, t) order.
  std::map<int32_t, std::vector<float>> dwte_sums;
  std::vector<std::vector<float>> dwpe_sums(T, std::vector<float>(C, 0.0f));
  if (dwpe != nullptr) {
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < C; ++i) dwpe_sums[t][i] = Load(dwpe + static_cast<size_t>(t) * C + i);
    }
  }
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const Storage* dout_bt = dout + (static_cast<size_t>(b) * T + t) * C;
      const int32_t token = tokens[b * T + t];
      std::vector<float>& dwte_sum = dwte_sums[token];
      if (dwte_sum.empty()) {
        dwte_sum.resize(C);
        for (int i = 0; i < C; ++i) dwte_sum[i] = Load(dwte + static_cast<size_t>(token) * C + i);
      }
      for (int i = 0; i < C; ++i) {
        const float d = Load(dout_bt + i);
        dwte_sum[i] += d;
        dwpe_sums[t][i] += d;
      }
    }
  }
  for (const auto& [token, sum] : dwte_sums) {
    for (int i = 0; i < C; ++i) Store(dwte + static_cast<size_t>(token) * C + i, sum[i]);
  }
  if (dwpe == nullptr) return;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < C; ++i) Store(dwpe + static_cast<size_t>(t) * C + i, dwpe_sums[t][i]);
  }
}

template <typename Storage>
void EncoderForward(Storage* out, const int32_t* tokens, const Storage* wte, const Storage* wpe,
                    int B, int T, int C) {
  const int rows = B * T;
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int row = 0; row < rows; ++row) {
    const int t = row % T;
    Storage* out_row = out + static_cast<size_t>(row) * C;
    const Storage* wte_row = wte + static_cast<size_t>(tokens[row]) * C;
    if (wpe == nullptr) {
      std::copy(wte_row, wte_row + C, out_row);
    } else {
      AddRows(out_row, wte_row, wpe + static_cast<size_t>(t) * C, C);
    }
  }
}

template <typename Storage>
void EncoderBackward(Storage* dwte, Storage* dwpe, const Storage* dout, const int32_t* tokens,
                     int B, int T, int C) {
  const int rows = B * T;
  // Positions grouped by token, (b, t) order kept within a group; group g is
  // order[group_begin[g] .. group_begin[g + 1]).
  std::vector<int> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [tokens](int x, int y) { return tokens[x] < tokens[y]; });
  std::vector<int> group_begin;
  for (int k = 0; k < rows; ++k) {
    if (k == 0 || tokens[order[k]] != tokens[order[k - 1]]) group_begin.push_back(k);
  }
  const int num_groups = static_cast<int>(group_begin.size());
  group_begin.push_back(rows);

#pragma omp parallel if (rows > 1)
  {
    std::vector<float> sum(C);
    // Token rows: groups differ in size (frequent tokens), hence dynamic scheduling.
#pragma omp for schedule(dynamic, 4) nowait
    for (int g = 0; g < num_groups; ++g) {
      Storage* dwte_row = dwte + static_cast<size_t>(tokens[order[group_begin[g]]]) * C;
      LoadRow(sum.data(), dwte_row, C);
      for (int k = group_begin[g]; k < group_begin[g + 1]; ++k) {
        AddRowToFloat(sum.data(), dout + static_cast<size_t>(order[k]) * C, C);
      }
      StoreRow(dwte_row, sum.data(), C);
    }
    // Position rows: dwpe[t] gets dout[b,t] for b in order.
#pragma omp for schedule(static)
    for (int t = 0; t < (dwpe == nullptr ? 0 : T); ++t) {
      Storage* dwpe_row = dwpe + static_cast<size_t>(t) * C;
      LoadRow(sum.data(), dwpe_row, C);
      for (int b = 0; b < B; ++b) {
        AddRowToFloat(sum.data(), dout + (static_cast<size_t>(b) * T + t) * C, C);
      }
      StoreRow(dwpe_row, sum.data(), C);
    }
  }
}

#define STRATA_INSTANTIATE(S)                                                                      \
  template void EncoderForwardReference<S>(S*, const int32_t*, const S*, const S*, int, int, int); \
  template void EncoderForward<S>(S*, const int32_t*, const S*, const S*, int, int, int);          \
  template void EncoderBackwardReference<S>(S*, S*, const S*, const int32_t*, int, int, int);      \
  template void EncoderBackward<S>(S*, S*, const S*, const int32_t*, int, int, int);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
