// CPU matmuls (linear layers) for fp32 and bf16 storage. The reference is a plain,
// single-threaded loop nest with fp32 accumulation and one rounding per output element: it is
// the specification. The fast path runs the same three GEMMs through oneDNN's matmul
// primitive on the caller's buffers (transposes are expressed as strides, nothing is copied):
//   forward   out[N,OC]    = inp[N,C]      * W^T[C,OC] (+ bias)
//   backward  dinp[N,C]   += dout[N,OC]    * W[OC,C]     (sum post-op: beta = 1)
//             dweight[OC,C] += dout^T[OC,N] * inp[N,C]   (sum post-op: beta = 1)
// and dbias += column sums of dout with an OpenMP loop (fp32 sums, one rounding per element).
// For bf16, sources and weights are bf16, oneDNN accumulates in fp32 and rounds the final
// destination value (including the accumulated old value) to bf16 once.
//
// Thread-safety: primitives are created once per (kind, dtype, shape, OpenMP thread count)
// and kept in a mutex-protected cache. They are created with a user-managed scratchpad, and
// every calling thread brings its own scratchpad and oneDNN stream (thread_local), so one
// cached primitive may run from several threads at once (oneDNN's default library-managed
// scratchpad would tie each primitive to the thread that created it).
//
// bf16 where oneDNN has no bf16 GEMM (oneDNN 2.6 without AVX-512: AMD before Zen 4, most
// client CPUs): the widened path. Blocks of weight rows are widened to fp32 (exact), run
// through the fp32 primitives and each output rounded to bf16 once, as the bf16 primitive
// would (same fp32 accumulation, another order). Backward keeps dinp in fp32 across the
// blocks and rounds old + sum once.
//
// Errors: the header's functions return nothing, so if oneDNN cannot create or run a
// primitive (fp32 ones too) the call falls back to the reference, which is correct but
// slow (in the widened path, per block, on the widened values); either fallback says so
// once per shape on stderr. oneDNN validates arguments before
// it writes any output, so a failed call has not touched the destination.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace strata::cpu {
namespace {

using dnnl::memory;

// ----------------------------------------------------------------------------------------
// Reference (the specification)

// Forward: one fp32 dot product per output, bias added last, one rounding.
template <typename T>
void ForwardReference(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  for (int64_t n = 0; n < N; ++n) {
    const T* inp_row = inp + n * C;
    for (int64_t o = 0; o < OC; ++o) {
      const T* weight_row = weight + o * C;
      float sum = 0.0f;
      for (int64_t c = 0; c < C; ++c) sum += Load(inp_row + c) * Load(weight_row + c);
      if (bias != nullptr) sum += Load(bias + o);
      Store(out + n * OC + o, sum);
    }
  }
}

// Backward: every output element's contributions are summed in fp32 first (a row at a time),
// then added to the existing value with one rounding, as the fast path does.

// dinp[n,c] += sum_o dout[n,o] * weight[o,c]
template <typename T>
void BackwardInputReference(T* dinp, const T* dout, const T* weight, int N, int C, int OC) {
  std::vector<float> row_sums(static_cast<size_t>(std::max(C, 0)));
  for (int64_t n = 0; n < N; ++n) {
    std::fill(row_sums.begin(), row_sums.end(), 0.0f);
    for (int64_t o = 0; o < OC; ++o) {
      const float d = Load(dout + n * OC + o);
      const T* weight_row = weight + o * C;
      for (int64_t c = 0; c < C; ++c) row_sums[c] += d * Load(weight_row + c);
    }
    T* dinp_row = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) Store(dinp_row + c, Load(dinp_row + c) + row_sums[c]);
  }
}

// dweight[o,c] += sum_n dout[n,o] * inp[n,c]
template <typename T>
void BackwardWeightReference(T* dweight, const T* dout, const T* inp, int N, int C, int OC) {
  std::vector<float> row_sums(static_cast<size_t>(std::max(C, 0)));
  for (int64_t o = 0; o < OC; ++o) {
    std::fill(row_sums.begin(), row_sums.end(), 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      const float d = Load(dout + n * OC + o);
      const T* inp_row = inp + n * C;
      for (int64_t c = 0; c < C; ++c) row_sums[c] += d * Load(inp_row + c);
    }
    T* dweight_row = dweight + o * C;
    for (int64_t c = 0; c < C; ++c) Store(dweight_row + c, Load(dweight_row + c) + row_sums[c]);
  }
}

// dbias[o] += sum_n dout[n,o]
template <typename T>
void BackwardBiasReference(T* dbias, const T* dout, int N, int OC) {
  for (int64_t o = 0; o < OC; ++o) {
    float sum = 0.0f;
    for (int64_t n = 0; n < N; ++n) sum += Load(dout + n * OC + o);
    Store(dbias + o, Load(dbias + o) + sum);
  }
}

template <typename T>
void BackwardReference(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                       int N, int C, int OC) {
  if (dinp != nullptr) BackwardInputReference(dinp, dout, weight, N, C, OC);
  if (dweight != nullptr) BackwardWeightReference(dweight, dout, inp, N, C, OC);
  if (dbias != nullptr) BackwardBiasReference(dbias, dout, N, OC);
}

// ----------------------------------------------------------------------------------------
// Fast path: oneDNN matmul primitives

// The three GEMMs of a linear layer; kForwardBias is a separate primitive (bias argument).
enum class GemmKind { kForward, kForwardBias, kBackwardInput, kBackwardWeight };

template <typename T>
constexpr memory::data_type DnnlType() {
  return std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
}

template <typename T>
constexpr DType StorageType() {
  return std::is_same_v<T, float> ? DType::kF32 : DType::kBF16;
}

struct PrimitiveKey {
  GemmKind kind;
  DType dtype;
  int n, c, oc;
  int threads;  // oneDNN sizes its parallel decomposition at creation
  bool operator<(const PrimitiveKey& other) const {
    return std::tie(kind, dtype, n, c, oc, threads) <
           std::tie(other.kind, other.dtype, other.n, other.c, other.oc, other.threads);
  }
};

// A created primitive and the descriptors of the memories it runs on. `primitive` is empty
// when oneDNN could not create one for this key; callers then use the reference.
struct CachedPrimitive {
  std::unique_ptr<dnnl::matmul> primitive;
  memory::desc src, weights, bias, dst;
  memory::desc scratchpad;
  size_t scratchpad_bytes = 0;
};

// One CPU engine for the process. Returns null if oneDNN cannot create it.
const dnnl::engine* CpuEngine() {
  static const dnnl::engine* engine = []() -> const dnnl::engine* {
    try {
      return new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never freed: outlives all users
    } catch (const dnnl::error& e) {
      std::fprintf(stderr,
                   "strata::cpu matmul: oneDNN CPU engine unavailable (%s); "
                   "using the reference matmul\n",
                   e.what());
      return nullptr;
    }
  }();
  return engine;
}

// Per-thread oneDNN stream and scratchpad (see the thread-safety note at the top).
struct ThreadResources {
  std::unique_ptr<dnnl::stream> stream;
  std::unique_ptr<uint8_t, decltype(&std::free)> scratchpad{nullptr, &std::free};
  size_t scratchpad_capacity_bytes = 0;

  // Returns a 64-byte aligned buffer of at least `bytes`, or null if allocation fails.
  void* Scratchpad(size_t bytes) {
    if (bytes > scratchpad_capacity_bytes) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      scratchpad.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
      scratchpad_capacity_bytes = scratchpad ? rounded : 0;
      if (!scratchpad) return nullptr;
    }
    return scratchpad.get();
  }
};

ThreadResources& ThisThreadResources() {
  thread_local ThreadResources resources;
  return resources;
}

// Memory descriptors of each GEMM, straight over the callers' row-major buffers.
void DescribeGemm(const PrimitiveKey& key, memory::data_type type, CachedPrimitive* out) {
  const memory::dim n = key.n, c = key.c, oc = key.oc;
  switch (key.kind) {
    case GemmKind::kForward:
    case GemmKind::kForwardBias:
      out->src = memory::desc({n, c}, type, {c, 1});       // inp
      out->weights = memory::desc({c, oc}, type, {1, c});  // W^T: W is [OC,C] row-major
      out->dst = memory::desc({n, oc}, type, {oc, 1});     // out
      if (key.kind == GemmKind::kForwardBias) out->bias = memory::desc({1, oc}, type, {oc, 1});
      break;
    case GemmKind::kBackwardInput:
      out->src = memory::desc({n, oc}, type, {oc, 1});     // dout
      out->weights = memory::desc({oc, c}, type, {c, 1});  // W
      out->dst = memory::desc({n, c}, type, {c, 1});       // dinp
      break;
    case GemmKind::kBackwardWeight:
      out->src = memory::desc({oc, n}, type, {1, oc});    // dout^T
      out->weights = memory::desc({n, c}, type, {c, 1});  // inp
      out->dst = memory::desc({oc, c}, type, {c, 1});     // dweight
      break;
  }
}

std::shared_ptr<const CachedPrimitive> CreatePrimitive(const PrimitiveKey& key,
                                                       memory::data_type type) {
  auto cached = std::make_shared<CachedPrimitive>();
  const dnnl::engine* engine = CpuEngine();
  if (engine == nullptr) return cached;
  try {
    DescribeGemm(key, type, cached.get());
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (key.kind == GemmKind::kBackwardInput || key.kind == GemmKind::kBackwardWeight) {
      dnnl::post_ops accumulate;
      accumulate.append_sum(1.0f);  // dst = gemm + 1 * dst, in fp32, one rounding
      attr.set_post_ops(accumulate);
    }
    const dnnl::matmul::desc desc =
        key.kind == GemmKind::kForwardBias
            ? dnnl::matmul::desc(cached->src, cached->weights, cached->bias, cached->dst)
            : dnnl::matmul::desc(cached->src, cached->weights, cached->dst);
    const dnnl::matmul::primitive_desc pd(desc, attr, *engine);
    cached->scratchpad = pd.scratchpad_desc();
    cached->scratchpad_bytes = cached->scratchpad.get_size();
    cached->primitive = std::make_unique<dnnl::matmul>(pd);
  } catch (const dnnl::error& e) {
    cached->primitive.reset();
    // bf16 without a bf16 GEMM is this CPU's lot (said once); fp32 is a surprise (per shape).
    static bool told_bf16 = false;  // under GetPrimitive's lock
    if (key.dtype == DType::kF32 || !told_bf16) {
      std::fprintf(stderr,
                   "strata::cpu matmul: oneDNN cannot create %s GEMM kind %d for N=%d C=%d OC=%d "
                   "(%s); using %s\n",
                   DTypeName(key.dtype), static_cast<int>(key.kind), key.n, key.c, key.oc, e.what(),
                   key.dtype == DType::kBF16
                       ? "fp32 GEMMs on widened values for every bf16 matmul (no AVX-512?)"
                       : "the reference matmul for it");
      told_bf16 = told_bf16 || key.dtype == DType::kBF16;
    }
  }
  return cached;
}

std::shared_ptr<const CachedPrimitive> GetPrimitive(const PrimitiveKey& key,
                                                    memory::data_type type) {
  static std::mutex mutex;
  static auto* cache = new std::map<PrimitiveKey, std::shared_ptr<const CachedPrimitive>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  // Created under the lock: once per shape, and concurrent first calls wait instead of
  // creating duplicates.
  auto cached = CreatePrimitive(key, type);
  cache->emplace(key, cached);
  return cached;
}

// Runs one GEMM on the callers' buffers. Returns false (destination untouched) if oneDNN
// cannot run it; the caller then computes it with the reference.
template <typename T>
bool RunGemm(GemmKind kind, int N, int C, int OC, const T* src, const T* weights, const T* bias,
             T* dst) {
  const PrimitiveKey key{kind, StorageType<T>(), N, C, OC, omp_get_max_threads()};
  const std::shared_ptr<const CachedPrimitive> cached = GetPrimitive(key, DnnlType<T>());
  if (!cached->primitive) return false;
  const dnnl::engine& engine = *CpuEngine();
  ThreadResources& resources = ThisThreadResources();
  try {
    if (!resources.stream) resources.stream = std::make_unique<dnnl::stream>(engine);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(cached->src, engine, const_cast<T*>(src))},
        {DNNL_ARG_WEIGHTS, memory(cached->weights, engine, const_cast<T*>(weights))},
        {DNNL_ARG_DST, memory(cached->dst, engine, dst)},
    };
    if (kind == GemmKind::kForwardBias) {
      args.emplace(DNNL_ARG_BIAS, memory(cached->bias, engine, const_cast<T*>(bias)));
    }
    if (cached->scratchpad_bytes > 0) {
      void* scratchpad = resources.Scratchpad(cached->scratchpad_bytes);
      if (scratchpad == nullptr) return false;
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(cached->scratchpad, engine, scratchpad));
    }
    cached->primitive->execute(*resources.stream, args);
    resources.stream->wait();
  } catch (const dnnl::error& e) {
    std::fprintf(stderr,
                 "strata::cpu matmul: oneDNN execution failed (%s); using the "
                 "reference matmul\n",
                 e.what());
    return false;
  }
  return true;
}

// dbias[o] += sum_n dout[n,o]. Columns are split into blocks across threads; each block
// walks the rows once with its fp32 sums in a local array.
template <typename T>
void AccumulateColumnSums(T* dbias, const T* dout, int N, int OC) {
  constexpr int kBlockColumns = 64;
  const int num_blocks = (OC + kBlockColumns - 1) / kBlockColumns;
#pragma omp parallel for schedule(static)
  for (int block = 0; block < num_blocks; ++block) {
    const int64_t first = static_cast<int64_t>(block) * kBlockColumns;
    const int width = static_cast<int>(std::min<int64_t>(kBlockColumns, OC - first));
    float sums[kBlockColumns] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * OC + first;
      for (int j = 0; j < width; ++j) sums[j] += Load(row + j);
    }
    for (int j = 0; j < width; ++j) Store(dbias + first + j, Load(dbias + first + j) + sums[j]);
  }
}

bool AnyEmpty(int N, int C, int OC) { return N <= 0 || C <= 0 || OC <= 0; }

// ----------------------------------------------------------------------------------------
// The widened path (bf16 through fp32 GEMMs)

// rows x cols of bf16 (row stride `stride`) into a packed fp32 [rows, cols], and back with
// one rounding per element.
void Widen(const bf16* source, size_t stride, int64_t rows, int64_t cols, float* dest) {
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* in = source + r * stride;
    float* out = dest + r * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] = Load(in + c);
  }
}
void Round(const float* source, int64_t rows, int64_t cols, bf16* dest, size_t stride) {
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = source + r * cols;
    bf16* out = dest + r * stride;
    for (int64_t c = 0; c < cols; ++c) Store(out + c, in[c]);
  }
}

// Per-thread fp32 scratch of the widened path, grown as needed up to three blocks.
struct WidenedScratch {
  std::vector<float> a, b, c;
};
WidenedScratch& ThisThreadScratch() {
  thread_local WidenedScratch scratch;
  return scratch;
}
float* Sized(std::vector<float>& buffer, size_t elements) {
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

// The widened path's blocks: `rows` weight rows (OC) and `chunk` rows of N at a time, each
// block of fp32 about 8 MiB at most (at least 16 weight rows, 1 row of N); a `tiling` > 0
// overrides (tests).
struct Tiling {
  int64_t rows, chunk;
};
Tiling Tile(int N, int C, int OC, WidenedTiling tiling) {
  constexpr int64_t kBlockFloats = (int64_t{8} << 20) / 4;
  Tiling t;
  t.rows = tiling.weight_rows > 0 ? tiling.weight_rows
                                  : std::max<int64_t>(16, kBlockFloats / std::max(C, 1));
  t.rows = std::min<int64_t>(t.rows, OC);
  t.chunk = tiling.input_rows > 0
                ? tiling.input_rows
                : std::max<int64_t>(1, kBlockFloats / std::max<int64_t>(C, t.rows));
  t.chunk = std::min<int64_t>(t.chunk, N);
  return t;
}

// One fp32 GEMM of the widened path through oneDNN, or, where it cannot run, the reference
// on the same fp32 values (the arguments as RunGemm takes them).
void Fp32Gemm(GemmKind kind, int N, int C, int OC, const float* src, const float* weights,
              const float* bias, float* dst) {
  if (RunGemm<float>(kind, N, C, OC, src, weights, bias, dst)) return;
  switch (kind) {
    case GemmKind::kForward:
    case GemmKind::kForwardBias:
      return ForwardReference(dst, src, weights, bias, N, C, OC);
    case GemmKind::kBackwardInput:  // src = dout, weights = W
      return BackwardInputReference(dst, src, weights, N, C, OC);
    case GemmKind::kBackwardWeight:  // src = dout, weights = inp
      return BackwardWeightReference(dst, src, weights, N, C, OC);
  }
}

// A few rows (decoding: N = 1): each output a dot product of the fp32 row with the bf16
// weight row widened in registers, so the weights are read once as bf16 instead of widened
// into memory and read again. Sixteen fp32 lanes per sum (one rounding to bf16 at the end).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) float DotRow(
    const float* x, const bf16* w, int64_t C) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= C; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[c + l] * Load(w + c + l);
  }
  for (int l = 0; c < C; ++c, ++l) lanes[l] += x[c] * Load(w + c);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

void ForwardFewRows(bf16* out, const float* inp32, const bf16* weight, const bf16* bias, int N,
                    int C, int OC) {
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < OC; ++o) {
    const bf16* row = weight + o * C;
    for (int64_t n = 0; n < N; ++n) {
      float sum = DotRow(inp32 + n * C, row, C);
      if (bias != nullptr) sum += Load(bias + o);
      Store(out + n * OC + o, sum);
    }
  }
}
constexpr int kFewRows = 4;  // up to this many rows of N: ForwardFewRows

}  // namespace

void MatmulForwardWidened(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N,
                          int C, int OC, WidenedTiling tiling) {
  if (AnyEmpty(N, C, OC)) return ForwardReference(out, inp, weight, bias, N, C, OC);
  WidenedScratch& scratch = ThisThreadScratch();
  if (N <= kFewRows && tiling.weight_rows == 0 && tiling.input_rows == 0) {
    float* inp32 = Sized(scratch.b, size_t(N) * C);
    Widen(inp, C, N, C, inp32);
    return ForwardFewRows(out, inp32, weight, bias, N, C, OC);
  }
  const Tiling t = Tile(N, C, OC, tiling);
  float* weight32 = Sized(scratch.a, size_t(t.rows) * C + (bias != nullptr ? t.rows : 0));
  float* bias32 = bias != nullptr ? weight32 + size_t(t.rows) * C : nullptr;
  float* inp32 = Sized(scratch.b, size_t(t.chunk) * C);
  float* out32 = Sized(scratch.c, size_t(t.chunk) * t.rows);
  const GemmKind kind = bias != nullptr ? GemmKind::kForwardBias : GemmKind::kForward;
  int64_t inp_at = -1;  // the input rows in inp32 (one chunk of all N: widened once)
  for (int64_t o = 0; o < OC; o += t.rows) {
    const int width = static_cast<int>(std::min<int64_t>(t.rows, OC - o));
    Widen(weight + o * C, C, width, C, weight32);
    if (bias != nullptr) Widen(bias + o, width, 1, width, bias32);
    for (int64_t n = 0; n < N; n += t.chunk) {
      const int count = static_cast<int>(std::min<int64_t>(t.chunk, N - n));
      if (n != inp_at) Widen(inp + n * C, C, count, C, inp32);
      inp_at = n;
      Fp32Gemm(kind, count, C, width, inp32, weight32, bias32, out32);
      Round(out32, count, width, out + n * OC + o, OC);
    }
  }
}

void MatmulBackwardWidened(bf16* dinp, bf16* dweight, const bf16* dout, const bf16* inp,
                           const bf16* weight, int N, int C, int OC, WidenedTiling tiling) {
  if (AnyEmpty(N, C, OC)) {
    return BackwardReference<bf16>(dinp, dweight, nullptr, dout, inp, weight, N, C, OC);
  }
  WidenedScratch& scratch = ThisThreadScratch();
  const Tiling t = Tile(N, C, OC, tiling);
  float* rows32 = Sized(scratch.a, size_t(t.rows) * C);    // dweight or weight rows
  float* chunk32 = Sized(scratch.b, size_t(t.chunk) * C);  // inp or dinp rows
  float* dout32 = Sized(scratch.c, size_t(t.chunk) * t.rows);
  // dweight[o block] += dout[:, o block]^T * inp, the sum over N chunks in fp32.
  if (dweight != nullptr) {
    int64_t inp_at = -1;  // the input rows in chunk32 (one chunk of all N: widened once)
    for (int64_t o = 0; o < OC; o += t.rows) {
      const int width = static_cast<int>(std::min<int64_t>(t.rows, OC - o));
      Widen(dweight + o * C, C, width, C, rows32);
      for (int64_t n = 0; n < N; n += t.chunk) {
        const int count = static_cast<int>(std::min<int64_t>(t.chunk, N - n));
        Widen(dout + n * OC + o, OC, count, width, dout32);
        if (n != inp_at) Widen(inp + n * C, C, count, C, chunk32);
        inp_at = n;
        Fp32Gemm(GemmKind::kBackwardWeight, count, C, width, dout32, chunk32, nullptr, rows32);
      }
      Round(rows32, width, C, dweight + o * C, C);
    }
  }
  // dinp[n chunk] += dout[n chunk, :] * weight, the sum over OC blocks in fp32.
  if (dinp != nullptr) {
    int64_t weight_at = -1;  // the weight rows in rows32 (one block of all OC: widened once)
    for (int64_t n = 0; n < N; n += t.chunk) {
      const int count = static_cast<int>(std::min<int64_t>(t.chunk, N - n));
      Widen(dinp + n * C, C, count, C, chunk32);
      for (int64_t o = 0; o < OC; o += t.rows) {
        const int width = static_cast<int>(std::min<int64_t>(t.rows, OC - o));
        Widen(dout + n * OC + o, OC, count, width, dout32);
        if (o != weight_at) Widen(weight + o * C, C, width, C, rows32);
        weight_at = o;
        Fp32Gemm(GemmKind::kBackwardInput, count, C, width, dout32, rows32, nullptr, chunk32);
      }
      Round(chunk32, count, C, dinp + n * C, C);
    }
  }
}

template <typename T>
void MatmulForwardReference(T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                            int OC) {
  ForwardReference(out, inp, weight, bias, N, C, OC);
}

template <typename T>
void MatmulBackwardReference(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                             const T* weight, int N, int C, int OC) {
  BackwardReference(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

template <typename T>
void MatmulForward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  // Empty shapes (C = 0 still means out = bias) are left to the reference.
  if (AnyEmpty(N, C, OC)) return ForwardReference(out, inp, weight, bias, N, C, OC);
  const GemmKind kind = bias != nullptr ? GemmKind::kForwardBias : GemmKind::kForward;
  if (RunGemm<T>(kind, N, C, OC, inp, weight, bias, out)) return;
  if constexpr (std::is_same_v<T, bf16>) {
    MatmulForwardWidened(out, inp, weight, bias, N, C, OC);
  } else {
    ForwardReference(out, inp, weight, bias, N, C, OC);
  }
}

template <typename T>
void MatmulBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                    int N, int C, int OC) {
  if (AnyEmpty(N, C, OC)) {
    return BackwardReference(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  if (dbias != nullptr) AccumulateColumnSums(dbias, dout, N, OC);
  if constexpr (std::is_same_v<T, bf16>) {
    // Where oneDNN has no bf16 GEMM (the primitive of a kind is created or refused once
    // per shape), both GEMMs through fp32.
    const PrimitiveKey key{dinp != nullptr ? GemmKind::kBackwardInput : GemmKind::kBackwardWeight,
                           DType::kBF16,
                           N,
                           C,
                           OC,
                           omp_get_max_threads()};
    if ((dweight != nullptr || dinp != nullptr) &&
        !GetPrimitive(key, memory::data_type::bf16)->primitive) {
      return MatmulBackwardWidened(dinp, dweight, dout, inp, weight, N, C, OC);
    }
  }
  if (dweight != nullptr &&
      !RunGemm<T>(GemmKind::kBackwardWeight, N, C, OC, dout, inp, nullptr, dweight)) {
    BackwardWeightReference(dweight, dout, inp, N, C, OC);
  }
  if (dinp != nullptr &&
      !RunGemm<T>(GemmKind::kBackwardInput, N, C, OC, dout, weight, nullptr, dinp)) {
    BackwardInputReference(dinp, dout, weight, N, C, OC);
  }
}

#define STRATA_INSTANTIATE_MATMUL(T)                                                        \
  template void MatmulForward<T>(T*, const T*, const T*, const T*, int, int, int);          \
  template void MatmulBackward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int); \
  template void MatmulForwardReference<T>(T*, const T*, const T*, const T*, int, int, int); \
  template void MatmulBackwardReference<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);
STRATA_INSTANTIATE_MATMUL(float)
STRATA_INSTANTIATE_MATMUL(bf16)
#undef STRATA_INSTANTIATE_MATMUL

}  // namespace strata::cpu
