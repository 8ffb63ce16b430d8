// CPU elementwise kernels: references written as plain loops, fast versions that split the
// array into fixed chunks run by OpenMP threads, each chunk handled by a span function that
// the compiler vectorises for the ISA chosen at load time (STRATA_CPU_SIMD_CLONES).
// The fast GELU replaces tanhf by 1 - 2 / (1 + e^(2u)) with ExpApprox, which vectorises;
// its absolute error is about 1e-7, the same order as fp32 rounding of the result.
// Dropout's mask is kernels/dropout_mask.h's, shared with the CUDA kernel.
// Thread-safety: see elementwise.h.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dropout_mask.h"

namespace strata::cpu {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// Elements per parallel work item: large enough that a chunk's span call and OpenMP's
// scheduling are negligible, small enough that 2-16 threads share a 1M-element array.
constexpr size_t kChunkElements = 16384;

// Runs span(begin, end) over [0, n) in chunks, in parallel when there is more than one.
template <typename SpanFn>
void ForEachChunk(size_t n, SpanFn span) {
  const size_t num_chunks = (n + kChunkElements - 1) / kChunkElements;
#pragma omp parallel for schedule(static) if (num_chunks > 1)
  for (size_t chunk = 0; chunk < num_chunks; ++chunk) {
    const size_t begin = chunk * kChunkElements;
    span(begin, std::min(n, begin + kChunkElements));
  }
}

// Runs row(i) for each of N rows of n elements, in parallel when they hold more than one
// chunk's worth of elements.
template <typename RowFn>
void ForEachRow(int N, int n, RowFn row) {
  const bool parallel = static_cast<size_t>(N) * static_cast<size_t>(n) > kChunkElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int i = 0; i < N; ++i) row(i);
}

// tanh(u) = 1 - 2 / (1 + e^(2u)); saturates to +-1 correctly because ExpApprox saturates
// at e^88 and flushes to 0 below e^-87.
inline float TanhApprox(float u) { return 1.0f - 2.0f / (1.0f + ExpApprox(2.0f * u)); }

template <typename T>
STRATA_CPU_SIMD_CLONES void GeluForwardSpan(T* out, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Load(inp + i);
    const float tanh_out = TanhApprox(kGeluScale * (x + kGeluCubic * x * x * x));
    Store(out + i, 0.5f * x * (1.0f + tanh_out));
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void GeluBackwardSpan(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Load(inp + i);
    // With e = e^(2u): tanh(u) = 1 - 2 / (1 + e) and sech^2(u) = 4e / (1 + e)^2. The
    // latter keeps full relative precision where 1 - tanh^2 would cancel.
    const float e = ExpApprox(2.0f * kGeluScale * (x + kGeluCubic * x * x * x));
    const float inv_one_plus_e = 1.0f / (1.0f + e);
    const float tanh_out = 1.0f - 2.0f * inv_one_plus_e;
    const float sech_squared = (4.0f * inv_one_plus_e) * (e * inv_one_plus_e);  // no overflow
    const float local_grad = 0.5f * (1.0f + tanh_out) + 0.5f * x * sech_squared * kGeluScale *
                                                            (1.0f + 3.0f * kGeluCubic * x * x);
    Store(dinp + i, Load(dinp + i) + local_grad * Load(dout + i));
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void AddSpan(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(out + i, Load(a + i) + Load(b + i));
}

// The LoRA row spans carry no STRATA_CPU_SIMD_CLONES, on purpose: in the AVX2 / AVX-512
// clones GCC would fuse dst + alpha * src into an FMA (one rounding instead of two), and the
// fast version would no longer be bit-identical to the reference and the CUDA kernel (which
// rounds the product and the sum separately). Compiled for the baseline ISA (no FMA) they
// still vectorise, and the ops are memory-bound, so wider vectors would gain little.
template <typename T>
void AddScaledSpan(T* dst, const T* src, size_t n, float alpha) {
  for (size_t j = 0; j < n; ++j) Store(dst + j, Load(dst + j) + alpha * Load(src + j));
}

template <typename T>
void ScaledSpan(T* dst, const T* src, size_t n, float alpha) {
  for (size_t j = 0; j < n; ++j) Store(dst + j, alpha * Load(src + j));
}

// One row of Dropout: the row's hash is computed once, then one Mix per channel. No FMA to
// fear here (a quotient, then a sum), so the clones give the reference's bits.
template <typename T>
STRATA_CPU_SIMD_CLONES void DropoutRowSpan(T* out, const T* in, int C, uint64_t row_hash, float p,
                                           float keep_denominator, bool accumulate) {
  if (accumulate) {
    for (int c = 0; c < C; ++c) {
      const float kept = DropoutKeepInRow(row_hash, c, p) ? Load(in + c) / keep_denominator : 0.0f;
      Store(out + c, Load(out + c) + kept);
    }
  } else {
    for (int c = 0; c < C; ++c) {
      Store(out + c, DropoutKeepInRow(row_hash, c, p) ? Load(in + c) / keep_denominator : 0.0f);
    }
  }
}

template <typename T>
STRATA_CPU_SIMD_CLONES void AccumulateToFloatSpan(float* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += Load(src + i);
}

template <typename T>
STRATA_CPU_SIMD_CLONES void CastFromFloatSpan(T* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(dst + i, src[i]);
}

template <typename T>
STRATA_CPU_SIMD_CLONES void CastToFloatSpan(float* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Load(src + i);
}

// Eight independent fp64 accumulators so the loop vectorises without reassociating a
// single sum (which the compiler may not do for floating point).
STRATA_CPU_SIMD_CLONES double SumSquaresSpan(const float* x, size_t n) {
  constexpr size_t kLanes = 8;
  double lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t lane = 0; lane < kLanes; ++lane) {
      const double value = x[i + lane];
      lanes[lane] += value * value;
    }
  }
  double sum = 0.0;
  for (size_t lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// References.

template <typename T>
void GeluForwardReference(T* out, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Load(inp + i);
    const float cube = kGeluCubic * x * x * x;
    Store(out + i, 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube))));
  }
}

template <typename T>
void GeluBackwardReference(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Load(inp + i);
    const float cube = kGeluCubic * x * x * x;
    const float tanh_arg = kGeluScale * (x + cube);
    const float tanh_out = std::tanh(tanh_arg);
    const float cosh_out = std::cosh(tanh_arg);  // inf for |arg| > 89: sech^2 is then 0
    const float sech_squared = 1.0f / (cosh_out * cosh_out);
    const float local_grad = 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_squared * kGeluScale *
                                                            (1.0f + 3.0f * kGeluCubic * x * x);
    Store(dinp + i, Load(dinp + i) + local_grad * Load(dout + i));
  }
}

template <typename T>
void AddReference(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(out + i, Load(a + i) + Load(b + i));
}

template <typename T>
void AccumulateReference(T* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(dst + i, Load(dst + i) + Load(src + i));
}

template <typename T>
void AddScaledColumnsReference(T* dst, int dst_cols, int col, const T* src, int N, int n,
                               float alpha) {
  for (int64_t i = 0; i < N; ++i) {
    T* dst_row = dst + i * dst_cols + col;
    const T* src_row = src + i * n;
    for (int j = 0; j < n; ++j) {
      const float product = alpha * Load(src_row + j);
      Store(dst_row + j, Load(dst_row + j) + product);
    }
  }
}

template <typename T>
void ScaledColumnsReference(T* dst, const T* src, int src_cols, int col, int N, int n,
                            float alpha) {
  for (int64_t i = 0; i < N; ++i) {
    const T* src_row = src + i * src_cols + col;
    T* dst_row = dst + i * n;
    for (int j = 0; j < n; ++j) Store(dst_row + j, alpha * Load(src_row + j));
  }
}

template <typename T>
void DropoutReference(T* out, const T* in, int N, int C, int T_len, int64_t row0, float p,
                      uint64_t key, bool accumulate) {
  const float keep_denominator = 1.0f - p;
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const size_t at = static_cast<size_t>(i * C + c);
      const bool keep = DropoutKeep(key, row0 + i / T_len, i % T_len, c, p);
      const float value = keep ? Load(in + at) / keep_denominator : 0.0f;
      Store(out + at, accumulate ? Load(out + at) + value : value);
    }
  }
}

template <typename T>
void AccumulateToFloatReference(float* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += Load(src + i);
}

template <typename T>
void CastFromFloatReference(T* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(dst + i, src[i]);
}

template <typename T>
void CastToFloatReference(float* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Load(src + i);
}

void SumSquaresReference(float* result, const float* x, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  *result = static_cast<float>(sum);
}

// ---------------------------------------------------------------------------------------
// Fast versions.

template <typename T>
void GeluForward(T* out, const T* inp, size_t n) {
  ForEachChunk(
      n, [=](size_t begin, size_t end) { GeluForwardSpan(out + begin, inp + begin, end - begin); });
}

template <typename T>
void GeluBackward(T* dinp, const T* inp, const T* dout, size_t n) {
  ForEachChunk(n, [=](size_t begin, size_t end) {
    GeluBackwardSpan(dinp + begin, inp + begin, dout + begin, end - begin);
  });
}

template <typename T>
void Add(T* out, const T* a, const T* b, size_t n) {
  ForEachChunk(n, [=](size_t begin, size_t end) {
    AddSpan(out + begin, a + begin, b + begin, end - begin);
  });
}

template <typename T>
void Accumulate(T* dst, const T* src, size_t n) {
  // dst += src is out = a + b with out aliasing a.
  ForEachChunk(n, [=](size_t begin, size_t end) {
    AddSpan(dst + begin, static_cast<const T*>(dst) + begin, src + begin, end - begin);
  });
}

template <typename T>
void AddScaledColumns(T* dst, int dst_cols, int col, const T* src, int N, int n, float alpha) {
  ForEachRow(N, n, [=](int i) {
    AddScaledSpan(dst + static_cast<size_t>(i) * dst_cols + col, src + static_cast<size_t>(i) * n,
                  n, alpha);
  });
}

template <typename T>
void ScaledColumns(T* dst, const T* src, int src_cols, int col, int N, int n, float alpha) {
  ForEachRow(N, n, [=](int i) {
    ScaledSpan(dst + static_cast<size_t>(i) * n, src + static_cast<size_t>(i) * src_cols + col, n,
               alpha);
  });
}

template <typename T>
void Dropout(T* out, const T* in, int N, int C, int T_len, int64_t row0, float p, uint64_t key,
             bool accumulate) {
  const float keep_denominator = 1.0f - p;
  ForEachRow(N, C, [=](int i) {
    const size_t offset = static_cast<size_t>(i) * C;
    DropoutRowSpan(out + offset, in + offset, C, DropoutRowHash(key, row0 + i / T_len, i % T_len),
                   p, keep_denominator, accumulate);
  });
}

template <typename T>
void AccumulateToFloat(float* dst, const T* src, size_t n) {
  ForEachChunk(n, [=](size_t begin, size_t end) {
    AccumulateToFloatSpan(dst + begin, src + begin, end - begin);
  });
}

template <typename T>
void CastFromFloat(T* dst, const float* src, size_t n) {
  ForEachChunk(n, [=](size_t begin, size_t end) {
    CastFromFloatSpan(dst + begin, src + begin, end - begin);
  });
}

template <typename T>
void CastToFloat(float* dst, const T* src, size_t n) {
  ForEachChunk(
      n, [=](size_t begin, size_t end) { CastToFloatSpan(dst + begin, src + begin, end - begin); });
}

void SumSquares(float* result, const float* x, size_t n) {
  const size_t num_chunks = (n + kChunkElements - 1) / kChunkElements;
  std::vector<double> chunk_sums(num_chunks);
  double* sums = chunk_sums.data();
  ForEachChunk(n, [=](size_t begin, size_t end) {
    sums[begin / kChunkElements] = SumSquaresSpan(x + begin, end - begin);
  });
  double sum = 0.0;
  for (double chunk_sum : chunk_sums) sum += chunk_sum;
  *result = static_cast<float>(sum);
}

#define STRATA_INSTANTIATE(T)                                                                     \
  template void GeluForwardReference<T>(T*, const T*, size_t);                                    \
  template void GeluForward<T>(T*, const T*, size_t);                                             \
  template void GeluBackwardReference<T>(T*, const T*, const T*, size_t);                         \
  template void GeluBackward<T>(T*, const T*, const T*, size_t);                                  \
  template void AddReference<T>(T*, const T*, const T*, size_t);                                  \
  template void Add<T>(T*, const T*, const T*, size_t);                                           \
  template void AccumulateReference<T>(T*, const T*, size_t);                                     \
  template void Accumulate<T>(T*, const T*, size_t);                                              \
  template void AddScaledColumnsReference<T>(T*, int, int, const T*, int, int, float);            \
  template void AddScaledColumns<T>(T*, int, int, const T*, int, int, float);                     \
  template void ScaledColumnsReference<T>(T*, const T*, int, int, int, int, float);               \
  template void ScaledColumns<T>(T*, const T*, int, int, int, int, float);                        \
  template void DropoutReference<T>(T*, const T*, int, int, int, int64_t, float, uint64_t, bool); \
  template void Dropout<T>(T*, const T*, int, int, int, int64_t, float, uint64_t, bool);          \
  template void AccumulateToFloatReference<T>(float*, const T*, size_t);                          \
  template void AccumulateToFloat<T>(float*, const T*, size_t);                                   \
  template void CastFromFloatReference<T>(T*, const float*, size_t);                              \
  template void CastFromFloat<T>(T*, const float*, size_t);                                       \
  template void CastToFloatReference<T>(float*, const T*, size_t);                                \
  template void CastToFloat<T>(float*, const T*, size_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cpu
