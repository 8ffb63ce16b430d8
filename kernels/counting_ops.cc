// See counting_ops.h. Each op runs the CPU backend's argument checks (kernels/cpu/cpu_ops.cc),
// then Count()s its formula; sizes are widened to double before multiplying so that no int
// product overflows. No pointer is dereferenced and the stream is never touched.
#include "kernels/counting_ops.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/op_checks.h"

namespace strata {
namespace {

// One counter's share of a call, the others zero.
OpCounts MatmulFlops(double flops) {
  OpCounts work;
  work.matmul_flops = flops;
  return work;
}
OpCounts AttentionFlops(double flops) {
  OpCounts work;
  work.attention_flops = flops;
  return work;
}
OpCounts Bytes(double bytes) {
  OpCounts work;
  work.elementwise_bytes = bytes;
  return work;
}

// Causal attention forward: B*NH sequences-heads of T*(T+1)/2 (query, key) pairs, 4*hs flops
// each (2*hs for q.k, 2*hs for p*v); NH*hs = C.
double AttentionForwardFlops(int B, int T, int C) {
  return 2.0 * B * C * static_cast<double>(T) * (static_cast<double>(T) + 1);
}

constexpr double kFloatBytes = 4;  // fp32 statistics, losses and shards; int32 tokens

}  // namespace

OpCounts CountingOps::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

void CountingOps::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_ = OpCounts{};
}

Status CountingOps::Count(const OpCounts& work) {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_.matmul_flops += work.matmul_flops;
  counts_.attention_flops += work.attention_flops;
  counts_.adam_elements += work.adam_elements;
  counts_.adam8bit_elements += work.adam8bit_elements;
  counts_.elementwise_bytes += work.elementwise_bytes;
  counts_.calls += 1;
  return absl::OkStatus();
}

Status CountingOps::CountShapes(const OpCounts& work,
                                std::initializer_list<std::array<int, 6>> shapes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::array<int, 6>& shape : shapes) counts_.shapes[shape] += 1;
    counts_.shaped_bytes += work.elementwise_bytes;
  }
  return Count(work);
}

Status CountingOps::EncoderForward(Stream&, void*, const int32_t*, const void*, const void* wpe,
                                   int B, int T, int C) {
  RETURN_IF_ERROR(CheckNonNegative("EncoderForward", {{"B", B}, {"T", T}, {"C", C}}));
  const double rows = static_cast<double>(B) * T;
  return Count(Bytes(kFloatBytes * rows + D() * rows * C * (2 + (wpe != nullptr ? 1 : 0))));
}

Status CountingOps::EncoderBackward(Stream&, void*, void* dwpe, const void*, const int32_t*, int B,
                                    int T, int C) {
  RETURN_IF_ERROR(CheckNonNegative("EncoderBackward", {{"B", B}, {"T", T}, {"C", C}}));
  const double rows = static_cast<double>(B) * T;
  return Count(Bytes(kFloatBytes * rows + D() * rows * C * (3 + (dwpe != nullptr ? 2 : 0))));
}

Status CountingOps::LayerNormForward(Stream&, void*, float*, float*, const void*, const void*,
                                     const void*, int N, int C) {
  RETURN_IF_ERROR(CheckNonNegative("LayerNormForward", {{"N", N}, {"C", C}}));
  return CountShapes(Bytes(D() * (2.0 * N * C + 2.0 * C) + 2 * kFloatBytes * N),
                     {{OpCounts::kLayerNormForward, N, C, 0, 0, 0}});
}

Status CountingOps::LayerNormBackward(Stream&, void*, void*, void*, const void*, const void*,
                                      const void*, const float*, const float*, int N, int C) {
  RETURN_IF_ERROR(CheckNonNegative("LayerNormBackward", {{"N", N}, {"C", C}}));
  return CountShapes(Bytes(D() * (4.0 * N * C + 5.0 * C) + 2 * kFloatBytes * N),
                     {{OpCounts::kLayerNormBackward, N, C, 0, 0, 0}});
}

Status CountingOps::MatmulForward(Stream&, void*, const void*, const void*, const void*, int N,
                                  int C, int OC) {
  RETURN_IF_ERROR(CheckNonNegative("MatmulForward", {{"N", N}, {"C", C}, {"OC", OC}}));
  return CountShapes(MatmulFlops(2.0 * N * C * OC),
                     {{OpCounts::kMatmulForward, N, C, OC, 0, 0}});
}

Status CountingOps::MatmulBackward(Stream&, void* dinp, void* dweight, void* dbias, const void*,
                                   const void*, const void*, int N, int C, int OC) {
  RETURN_IF_ERROR(CheckNonNegative("MatmulBackward", {{"N", N}, {"C", C}, {"OC", OC}}));
  const double gemm = 2.0 * N * C * OC;
  double flops = 0;
  if (dinp != nullptr) flops += gemm;
  if (dweight != nullptr) flops += gemm;  // null: a frozen weight, the GEMM is skipped
  if (dbias != nullptr) flops += static_cast<double>(N) * OC;
  if (dinp != nullptr && dweight != nullptr) {
    return CountShapes(MatmulFlops(flops), {{OpCounts::kMatmulDinp, N, C, OC, 0, 0},
                                            {OpCounts::kMatmulDweight, N, C, OC, 0, 0}});
  }
  if (dinp != nullptr) {
    return CountShapes(MatmulFlops(flops), {{OpCounts::kMatmulDinp, N, C, OC, 0, 0}});
  }
  if (dweight != nullptr) {
    return CountShapes(MatmulFlops(flops), {{OpCounts::kMatmulDweight, N, C, OC, 0, 0}});
  }
  return Count(MatmulFlops(flops));
}

Status CountingOps::AttentionForward(Stream&, void*, float*, const void*, int B, int T, int C,
                                     int NH, int NKV) {
  RETURN_IF_ERROR(CheckHeadShape("AttentionForward", B, T, C, NH, NKV));
  return CountShapes(AttentionFlops(AttentionForwardFlops(B, T, C)),
                     {{OpCounts::kAttentionForward, B, T, C, NH, NKV}});
}

Status CountingOps::AttentionBackward(Stream&, void*, const void*, const void*, const void*,
                                      const float*, int B, int T, int C, int NH, int NKV) {
  RETURN_IF_ERROR(CheckHeadShape("AttentionBackward", B, T, C, NH, NKV));
  return CountShapes(AttentionFlops(2.5 * AttentionForwardFlops(B, T, C)),
                     {{OpCounts::kAttentionBackward, B, T, C, NH, NKV}});
}

Status CountingOps::AttentionDecode(Stream&, void*, const void*, int T, int C, int NH, int NKV) {
  RETURN_IF_ERROR(CheckHeadShape("AttentionDecode", 1, T, C, NH, NKV));
  if (T < 1) return absl::InvalidArgumentError("AttentionDecode: T must be >= 1");
  return Count(AttentionFlops(4.0 * C * T));
}

Status CountingOps::RmsNormForward(Stream&, void*, float*, const void*, const void*, int N, int C,
                                   float) {
  RETURN_IF_ERROR(CheckNonNegative("RmsNormForward", {{"N", N}, {"C", C}}));
  return Count(Bytes(D() * (2.0 * N * C + C) + kFloatBytes * N));
}

Status CountingOps::RmsNormBackward(Stream&, void*, void*, const void*, const void*, const void*,
                                    const float*, int N, int C) {
  RETURN_IF_ERROR(CheckNonNegative("RmsNormBackward", {{"N", N}, {"C", C}}));
  return Count(Bytes(D() * (4.0 * N * C + 3.0 * C) + kFloatBytes * N));
}

Status CountingOps::RopeForward(Stream&, void*, int B, int T, int NH, int NKV, int hs,
                                const RopeSpec& rope, int position0) {
  RETURN_IF_ERROR(CheckRopeShape("RopeForward", B, T, NH, NKV, hs, rope, position0));
  return Count(Bytes(2.0 * D() * B * T * (static_cast<double>(NH) + NKV) * hs));
}

Status CountingOps::RopeBackward(Stream&, void*, int B, int T, int NH, int NKV, int hs,
                                 const RopeSpec& rope, int position0) {
  RETURN_IF_ERROR(CheckRopeShape("RopeBackward", B, T, NH, NKV, hs, rope, position0));
  return Count(Bytes(2.0 * D() * B * T * (static_cast<double>(NH) + NKV) * hs));
}

Status CountingOps::CopyHeads(Stream&, void*, void*, int N, int heads_per_row, int first, int count,
                              int hs, bool) {
  RETURN_IF_ERROR(CheckHeadsShape("CopyHeads", N, heads_per_row, first, count, hs));
  return Count(Bytes(2.0 * D() * N * count * hs));
}

Status CountingOps::SwiGluForward(Stream&, void*, const void*, int N, int F) {
  RETURN_IF_ERROR(CheckNonNegative("SwiGluForward", {{"N", N}, {"F", F}}));
  return Count(Bytes(3.0 * D() * N * F));
}

Status CountingOps::SwiGluBackward(Stream&, void*, const void*, const void*, int N, int F) {
  RETURN_IF_ERROR(CheckNonNegative("SwiGluBackward", {{"N", N}, {"F", F}}));
  return Count(Bytes(7.0 * D() * N * F));
}

Status CountingOps::GeluForward(Stream&, void*, const void*, size_t n) {
  if (n > static_cast<size_t>(INT32_MAX)) return Count(Bytes(2.0 * D() * static_cast<double>(n)));
  return CountShapes(Bytes(2.0 * D() * static_cast<double>(n)),
                     {{OpCounts::kGeluForward, static_cast<int>(n), 0, 0, 0, 0}});
}

Status CountingOps::GeluBackward(Stream&, void*, const void*, const void*, size_t n) {
  if (n > static_cast<size_t>(INT32_MAX)) return Count(Bytes(4.0 * D() * static_cast<double>(n)));
  return CountShapes(Bytes(4.0 * D() * static_cast<double>(n)),
                     {{OpCounts::kGeluBackward, static_cast<int>(n), 0, 0, 0, 0}});
}

Status CountingOps::Add(Stream&, void*, const void*, const void*, size_t n) {
  return Count(Bytes(3.0 * D() * static_cast<double>(n)));
}

Status CountingOps::Accumulate(Stream&, void*, const void*, size_t n) {
  return Count(Bytes(3.0 * D() * static_cast<double>(n)));
}

Status CountingOps::AddScaledColumns(Stream&, void* dst, int dst_cols, int col, const void* src,
                                     int N, int n, float) {
  constexpr const char* kOp = "AddScaledColumns";
  RETURN_IF_ERROR(CheckColumnSlice(kOp, "dst_cols", dst_cols, col, N, n));
  if (long{N} * n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
  return Count(Bytes(3.0 * D() * N * n));
}

Status CountingOps::ScaledColumns(Stream&, void* dst, const void* src, int src_cols, int col, int N,
                                  int n, float) {
  constexpr const char* kOp = "ScaledColumns";
  RETURN_IF_ERROR(CheckColumnSlice(kOp, "src_cols", src_cols, col, N, n));
  if (long{N} * n > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"dst", dst}, {"src", src}}));
  return Count(Bytes(2.0 * D() * N * n));
}

Status CountingOps::Dropout(Stream&, void* out, const void* in, int N, int C, int T, int64_t row0,
                            float p, uint64_t, bool accumulate) {
  constexpr const char* kOp = "Dropout";
  RETURN_IF_ERROR(CheckDropout(kOp, N, C, T, row0, p));
  if (long{N} * C > 0) RETURN_IF_ERROR(CheckNotNull(kOp, {{"out", out}, {"in", in}}));
  return Count(Bytes((accumulate ? 3.0 : 2.0) * D() * N * C));
}

Status CountingOps::SoftmaxCrossEntropy(Stream&, float*, void*, const int32_t*, int N, int V,
                                        int Vp, float dloss) {
  RETURN_IF_ERROR(CheckCrossEntropyShape("SoftmaxCrossEntropy", N, V, Vp));
  double bytes = D() * N * V + 2 * kFloatBytes * N;  // logits read; targets read, losses written
  if (dloss != 0.0f) bytes += D() * N * Vp;          // the gradient written over the logits
  return CountShapes(Bytes(bytes),
                     {{OpCounts::kSoftmaxCrossEntropy, N, V, Vp, dloss != 0.0f ? 1 : 0, 0}});
}

Status CountingOps::AccumulateToFloat(Stream&, float*, const void*, size_t n) {
  return Count(Bytes((D() + 2 * kFloatBytes) * static_cast<double>(n)));
}

Status CountingOps::CastFromFloat(Stream&, void*, const float*, size_t n) {
  return Count(Bytes((D() + kFloatBytes) * static_cast<double>(n)));
}

Status CountingOps::CastToFloat(Stream&, float*, const void*, size_t n) {
  return Count(Bytes((D() + kFloatBytes) * static_cast<double>(n)));
}

Status CountingOps::SumSquares(Stream&, float* result, const float*, size_t n) {
  RETURN_IF_ERROR(CheckNotNull("SumSquares", {{"result", result}}));
  return Count(Bytes(kFloatBytes * static_cast<double>(n) + kFloatBytes));
}

Status CountingOps::DequantizeNf4(Stream&, void* out, const uint8_t* codes,
                                  const uint8_t* absmax_codes, const float* absmax2,
                                  const float* offset, size_t n) {
  if (n > 0) {
    RETURN_IF_ERROR(CheckNotNull("DequantizeNf4", {{"out", out},
                                                   {"codes", codes},
                                                   {"absmax_codes", absmax_codes},
                                                   {"absmax2", absmax2},
                                                   {"offset", offset}}));
  }
  const double blocks = static_cast<double>((n + 63) / 64);
  const double groups = static_cast<double>((n + 64 * 256 - 1) / (64 * 256));
  return Count(Bytes(static_cast<double>((n + 1) / 2) + blocks + kFloatBytes * groups +
                     kFloatBytes + D() * static_cast<double>(n)));
}

Status CountingOps::DequantizeInt8(Stream&, void* out, const int8_t* codes, const float* absmax,
                                   size_t n) {
  if (n > 0) {
    RETURN_IF_ERROR(
        CheckNotNull("DequantizeInt8", {{"out", out}, {"codes", codes}, {"absmax", absmax}}));
  }
  const double blocks = static_cast<double>((n + 63) / 64);
  return Count(Bytes((1.0 + D()) * static_cast<double>(n) + kFloatBytes * blocks));
}

Status CountingOps::WidenBf16(Stream&, void* out, const bf16* in, size_t n) {
  if (n > 0) RETURN_IF_ERROR(CheckNotNull("WidenBf16", {{"out", out}, {"in", in}}));
  return Count(Bytes((2.0 + D()) * static_cast<double>(n)));
}

Status CountingOps::AdamW(Stream&, void*, float*, const float*, float*, float*, size_t n,
                          const AdamParams& hp) {
  if (hp.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW: step=", hp.step, " (1-based, for bias correction)"));
  }
  OpCounts work;
  work.adam_elements = static_cast<double>(n);
  return Count(work);
}

Status CountingOps::AdamW8bit(Stream&, void*, float* master, const float* grad,
                              uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
                              float* v_absmax, size_t n, const AdamParams& hp) {
  if (hp.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW8bit: step=", hp.step, " (1-based, for bias correction)"));
  }
  if (n > 0) {
    RETURN_IF_ERROR(CheckNotNull("AdamW8bit", {{"master", master},
                                               {"grad", grad},
                                               {"m_codes", m_codes},
                                               {"m_absmax", m_absmax},
                                               {"v_codes", v_codes},
                                               {"v_absmax", v_absmax}}));
  }
  OpCounts work;
  work.adam8bit_elements = static_cast<double>(n);
  return Count(work);
}

std::unique_ptr<CountingOps> MakeCountingOps(DType dtype) {
  return std::make_unique<CountingOps>(dtype);
}

}  // namespace strata
