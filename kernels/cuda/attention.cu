// Causal self-attention with grouped-query heads on CUDA (cuda_kernels.h), a straightforward
// tiled version of flash attention that keeps nothing but the per-row log-sum-exp `stats` (as
// kernels/cpu/attention.h defines them) between forward and backward. qkv rows are
// (q: NH heads | k: NKV heads | v: NKV heads) of hs = C/NH channels; query head h reads
// key/value head h / (NH/NKV) (NKV == NH: multi-head attention).
//
// Layout of every kernel: a block of 8 warps owns a tile of 32 rows of one (batch, head)
// ("own" rows: queries in the forward and the dQ pass, keys in the dK/dV pass); warp w
// owns rows 4w..4w+3 of the tile, and lane l holds channels l, l+32, l+64, l+96 of their
// fp32 accumulators (so hs <= 128). The other side (keys, or queries) streams through
// shared memory in tiles of 32 rows, one row per lane: each lane computes one score
// q_i.k_j for its row, and the warp then adds the 32 contributions in row order
// (__shfl_sync broadcasts each lane's factor). Every sum therefore runs in a fixed order
// and no two threads write the same output: results are deterministic, without atomics.
//
//   forward: online softmax over key tiles: m = running max, l = running sum of e^(s - m),
//            acc = sum e^(s - m) v; out = acc / l, stats = m + log l.
//   backward, with p_ij = e^(scale q_i.k_j - stats_i) (0 for j > i) and
//            D_i = dout_i . out_i:  ds_ij = p_ij (dout_i . v_j - D_i),
//            dq_i += scale sum_j ds_ij k_j   (one kernel, blocks own query rows of a query
//            head), dk_j += scale sum_i ds_ij q_i, dv_j += sum_i p_ij dout_i   (another
//            kernel, blocks own key rows of a key/value head and sum over the query heads
//            of its group in head order, so heads that share k and v need no atomics).
//            Both write disjoint parts of dqkv.
// Shared-memory rows that lanes read down a column have an odd stride, so the 32 lanes hit
// 32 different banks.
// Thread-safety: launchers are reentrant.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"
#include "device/cuda/cuda_status.h"

namespace strata::cuda_kernels {
namespace {

constexpr int kTile = kWarpSize;  // rows per block, and rows per streamed tile (one per lane)
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kChunks = kMaxAttentionHeadSize / kWarpSize;  // channels per lane

// Stride of a shared-memory row read down a column by the 32 lanes: odd, so conflict-free.
__host__ __device__ inline int OddStride(int hs) { return hs % 2 == 0 ? hs + 1 : hs; }

// Elements per row of qkv: C query channels, then NKV key and NKV value heads of hs.
__device__ inline size_t QkvRowStride(int C, int NKV, int hs) {
  return static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
}

// dst[r * stride + d] = src row (first + r), channel d, for r < count, d < hs, in fp32.
template <typename S>
__device__ void LoadTile(float* dst, int stride, const S* src, size_t src_stride, int first,
                         int count, int hs) {
  for (int e = threadIdx.x; e < count * hs; e += blockDim.x) {
    const int r = e / hs, d = e % hs;
    dst[r * stride + d] = DeviceLoad(src + static_cast<size_t>(first + r) * src_stride + d);
  }
}

__device__ inline float Dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// grid (ceil(T / 32), NH, B). Shared: queries [32][hs], keys [32][OddStride(hs)],
// values [32][hs].
template <typename S>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(S* out, float* stats, const S* qkv, int T, int C, int NH, int NKV,
                           float scale) {
  float* shared = ::strata::cuda::DynamicShared<float>();
  const int hs = C / NH, key_stride = OddStride(hs);
  float* queries = shared;
  float* keys = queries + kTile * hs;
  float* values = keys + kTile * key_stride;
  const int b = blockIdx.z, h = blockIdx.y, kv_head = h / (NH / NKV);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int row_begin = blockIdx.x * kTile;
  const int row_end = min(T, row_begin + kTile);
  const size_t row_stride = QkvRowStride(C, NKV, hs);
  const S* qkv_b = qkv + static_cast<size_t>(b) * T * row_stride;
  const S* q_bh = qkv_b + h * hs;
  const S* k_bh = qkv_b + C + kv_head * hs;
  const S* v_bh = k_bh + NKV * hs;

  LoadTile(queries, hs, q_bh, row_stride, row_begin, row_end - row_begin, hs);
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp], acc[kRowsPerWarp][kChunks];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[i][c] = 0.0f;
  }

  for (int key_begin = 0; key_begin < row_end; key_begin += kTile) {
    const int key_count = min(kTile, row_end - key_begin);
    __syncthreads();  // the previous tile is consumed
    LoadTile(keys, key_stride, k_bh, row_stride, key_begin, key_count, hs);
    LoadTile(values, hs, v_bh, row_stride, key_begin, key_count, hs);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      const int t = row_begin + r;
      if (t >= row_end || key_begin > t) continue;  // uniform over the warp
      // Lane = key key_begin + lane; keys after t are masked (causal).
      const bool visible = key_begin + lane <= t;
      const float score =
          visible ? Dot(queries + r * hs, keys + lane * key_stride, hs) * scale : -INFINITY;
      const float new_max = fmaxf(row_max[i], WarpMax(score));  // lane 0 is visible: finite
      const float p = visible ? expf(score - new_max) : 0.0f;
      const float correction = expf(row_max[i] - new_max);  // 0 on the first tile
      row_sum[i] = row_sum[i] * correction + WarpSum(p);
      row_max[i] = new_max;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[i][c] *= correction;
      const int visible_count = min(key_count, t - key_begin + 1);
      for (int j = 0; j < visible_count; ++j) {
        const float p_j = __shfl_sync(kFullMask, p, j);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = lane + c * kWarpSize;
          if (d < hs) acc[i][c] += p_j * values[j * hs + d];
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = row_begin + warp * kRowsPerWarp + i;
    if (t >= row_end) continue;
    const float inv_sum = 1.0f / row_sum[i];
    S* out_row = out + (static_cast<size_t>(b) * T + t) * C + h * hs;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < hs) DeviceStore(out_row + d, acc[i][c] * inv_sum);
    }
    if (lane == 0) {
      stats[(static_cast<size_t>(b) * NH + h) * T + t] = row_max[i] + logf(row_sum[i]);
    }
  }
}

// D_t = dout_t . out_t for row t of head (b, h), reduced over the warp (every lane gets it).
template <typename S>
__device__ float DoutDotOut(const S* dout, const S* out, size_t offset, int hs) {
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.0f;
  for (int d = lane; d < hs; d += kWarpSize) {
    sum += DeviceLoad(dout + offset + d) * DeviceLoad(out + offset + d);
  }
  return WarpSum(sum);
}

// dq. grid (ceil(T / 32), NH, B). Shared: queries [32][hs], douts [32][hs],
// keys [32][OddStride(hs)], values [32][OddStride(hs)].
template <typename S>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardQueryKernel(S* dqkv, const S* dout, const S* qkv, const S* out,
                                 const float* stats, int T, int C, int NH, int NKV, float scale) {
  float* shared = ::strata::cuda::DynamicShared<float>();
  const int hs = C / NH, stride = OddStride(hs);
  float* queries = shared;
  float* douts = queries + kTile * hs;
  float* keys = douts + kTile * hs;
  float* values = keys + kTile * stride;
  const int b = blockIdx.z, h = blockIdx.y, kv_head = h / (NH / NKV);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int row_begin = blockIdx.x * kTile;
  const int row_end = min(T, row_begin + kTile);
  const size_t row_stride = QkvRowStride(C, NKV, hs);
  const S* qkv_b = qkv + static_cast<size_t>(b) * T * row_stride;
  const S* q_bh = qkv_b + h * hs;
  const S* k_bh = qkv_b + C + kv_head * hs;
  const S* v_bh = k_bh + NKV * hs;
  const size_t out_offset = static_cast<size_t>(b) * T * C + h * hs;
  const float* stats_bh = stats + (static_cast<size_t>(b) * NH + h) * T;

  LoadTile(queries, hs, q_bh, row_stride, row_begin, row_end - row_begin, hs);
  LoadTile(douts, hs, dout + out_offset, C, row_begin, row_end - row_begin, hs);
  float log_sum_exp[kRowsPerWarp], dout_dot_out[kRowsPerWarp], acc[kRowsPerWarp][kChunks];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = row_begin + warp * kRowsPerWarp + i;
    log_sum_exp[i] = t < row_end ? stats_bh[t] : 0.0f;
    dout_dot_out[i] =
        t < row_end ? DoutDotOut(dout, out, out_offset + static_cast<size_t>(t) * C, hs) : 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[i][c] = 0.0f;
  }

  for (int key_begin = 0; key_begin < row_end; key_begin += kTile) {
    const int key_count = min(kTile, row_end - key_begin);
    __syncthreads();
    LoadTile(keys, stride, k_bh, row_stride, key_begin, key_count, hs);
    LoadTile(values, stride, v_bh, row_stride, key_begin, key_count, hs);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      const int t = row_begin + r;
      if (t >= row_end || key_begin > t) continue;  // uniform over the warp
      float dscore = 0.0f;
      if (key_begin + lane <= t) {
        const float p =
            expf(Dot(queries + r * hs, keys + lane * stride, hs) * scale - log_sum_exp[i]);
        const float dp = Dot(douts + r * hs, values + lane * stride, hs);
        dscore = p * (dp - dout_dot_out[i]);
      }
      const int visible_count = min(key_count, t - key_begin + 1);
      for (int j = 0; j < visible_count; ++j) {
        const float dscore_j = __shfl_sync(kFullMask, dscore, j);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = lane + c * kWarpSize;
          if (d < hs) acc[i][c] += dscore_j * keys[j * stride + d];
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = row_begin + warp * kRowsPerWarp + i;
    if (t >= row_end) continue;
    S* dq = dqkv + (static_cast<size_t>(b) * T + t) * row_stride + h * hs;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < hs) DeviceStore(dq + d, DeviceLoad(dq + d) + scale * acc[i][c]);
    }
  }
}

// dk and dv. grid (ceil(T / 32), NKV, B); block (x, g) owns keys [32x, 32x + 32) of key/value
// head g and sums the contributions of its query heads g * (NH/NKV) .. (g + 1) * (NH/NKV) - 1
// in that order. Shared: keys [32][hs], values [32][hs], queries [32][OddStride(hs)],
// douts [32][OddStride(hs)], log-sum-exp [32], D [32].
template <typename S>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardKeyValueKernel(S* dqkv, const S* dout, const S* qkv, const S* out,
                                    const float* stats, int T, int C, int NH, int NKV,
                                    float scale) {
  float* shared = ::strata::cuda::DynamicShared<float>();
  const int hs = C / NH, stride = OddStride(hs);
  float* keys = shared;
  float* values = keys + kTile * hs;
  float* queries = values + kTile * hs;
  float* douts = queries + kTile * stride;
  float* tile_log_sum_exp = douts + kTile * stride;
  float* tile_dout_dot_out = tile_log_sum_exp + kTile;
  const int b = blockIdx.z, kv_head = blockIdx.y, group_size = NH / NKV;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int key_begin = blockIdx.x * kTile;
  const int key_end = min(T, key_begin + kTile);
  const size_t row_stride = QkvRowStride(C, NKV, hs);
  const S* qkv_b = qkv + static_cast<size_t>(b) * T * row_stride;
  const S* k_bh = qkv_b + C + kv_head * hs;
  const S* v_bh = k_bh + NKV * hs;

  LoadTile(keys, hs, k_bh, row_stride, key_begin, key_end - key_begin, hs);
  LoadTile(values, hs, v_bh, row_stride, key_begin, key_end - key_begin, hs);
  float dk[kRowsPerWarp][kChunks], dv[kRowsPerWarp][kChunks];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) dk[i][c] = dv[i][c] = 0.0f;
  }

  for (int h = kv_head * group_size; h < (kv_head + 1) * group_size; ++h) {
    const S* q_bh = qkv_b + h * hs;
    const size_t out_offset = static_cast<size_t>(b) * T * C + h * hs;
    const float* stats_bh = stats + (static_cast<size_t>(b) * NH + h) * T;
    // Only queries at or after a key see it (causal): start at the block's first key.
    for (int query_begin = key_begin; query_begin < T; query_begin += kTile) {
      const int query_count = min(kTile, T - query_begin);
      __syncthreads();  // the previous tile (of this head or the one before) is consumed
      LoadTile(queries, stride, q_bh, row_stride, query_begin, query_count, hs);
      LoadTile(douts, stride, dout + out_offset, C, query_begin, query_count, hs);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        if (r >= query_count) continue;  // uniform over the warp
        const int t = query_begin + r;
        const float d_t = DoutDotOut(dout, out, out_offset + static_cast<size_t>(t) * C, hs);
        if (lane == 0) {
          tile_log_sum_exp[r] = stats_bh[t];
          tile_dout_dot_out[r] = d_t;
        }
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        const int j = key_begin + r;  // this row's key
        if (j >= key_end) continue;   // uniform over the warp
        // Lane = query query_begin + lane; queries before the key are masked (causal).
        const int t = query_begin + lane;
        float p = 0.0f, dscore = 0.0f;
        if (lane < query_count && t >= j) {
          p = expf(Dot(queries + lane * stride, keys + r * hs, hs) * scale -
                   tile_log_sum_exp[lane]);
          const float dp = Dot(douts + lane * stride, values + r * hs, hs);
          dscore = p * (dp - tile_dout_dot_out[lane]);
        }
        for (int q = max(0, j - query_begin); q < query_count; ++q) {
          const float p_q = __shfl_sync(kFullMask, p, q);
          const float dscore_q = __shfl_sync(kFullMask, dscore, q);
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            const int d = lane + c * kWarpSize;
            if (d < hs) {
              dv[i][c] += p_q * douts[q * stride + d];
              dk[i][c] += dscore_q * queries[q * stride + d];
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int j = key_begin + warp * kRowsPerWarp + i;
    if (j >= key_end) continue;
    S* dk_row = dqkv + (static_cast<size_t>(b) * T + j) * row_stride + C + kv_head * hs;
    S* dv_row = dk_row + NKV * hs;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < hs) {
        DeviceStore(dk_row + d, DeviceLoad(dk_row + d) + scale * dk[i][c]);
        DeviceStore(dv_row + d, DeviceLoad(dv_row + d) + dv[i][c]);
      }
    }
  }
}

// Launches kKernel with `shared_bytes` of dynamic shared memory, raising the kernel's limit
// first when it exceeds the default 48 KiB (hs > ~100).
template <auto kKernel, typename... Args>
Status LaunchWithShared(const char* name, dim3 grid, size_t shared_bytes, cudaStream_t stream,
                        Args... args) {
  if (shared_bytes > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared_bytes)),
        absl::StrCat("allowing ", shared_bytes, " bytes of shared memory for ", name));
  }
  ::strata::cuda::Launch<kKernel>(grid, kThreads, shared_bytes, stream, args...);
  CUDA_RETURN_IF_ERROR(cudaGetLastError(), absl::StrCat("launching ", name, " on a ", grid.x, "x",
                                                        grid.y, "x", grid.z, " grid"));
  return absl::OkStatus();
}

}  // namespace

Status AttentionForward(DType dtype, void* out, float* stats, const void* qkv, int B, int T, int C,
                        int NH, int NKV, cudaStream_t stream) {
  if (B == 0 || T == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));  // as the CPU reference
  const dim3 grid((T + kTile - 1) / kTile, NH, B);
  const size_t shared_bytes = sizeof(float) * kTile * (2 * hs + OddStride(hs));
  return DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    return LaunchWithShared<&AttentionForwardKernel<S>>(
        "AttentionForwardKernel", grid, shared_bytes, stream, static_cast<S*>(out), stats,
        static_cast<const S*>(qkv), T, C, NH, NKV, scale);
  });
}

Status AttentionBackward(DType dtype, void* dqkv, const void* dout, const void* qkv,
                         const void* out, const float* stats, int B, int T, int C, int NH, int NKV,
                         cudaStream_t stream) {
  if (B == 0 || T == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const dim3 query_grid((T + kTile - 1) / kTile, NH, B);
  const dim3 key_value_grid((T + kTile - 1) / kTile, NKV, B);
  const size_t query_shared_bytes = sizeof(float) * kTile * (2 * hs + 2 * OddStride(hs));
  const size_t key_value_shared_bytes = query_shared_bytes + sizeof(float) * 2 * kTile;
  return DispatchStorage(dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    RETURN_IF_ERROR(LaunchWithShared<&AttentionBackwardQueryKernel<S>>(
        "AttentionBackwardQueryKernel", query_grid, query_shared_bytes, stream,
        static_cast<S*>(dqkv), static_cast<const S*>(dout), static_cast<const S*>(qkv),
        static_cast<const S*>(out), stats, T, C, NH, NKV, scale));
    return LaunchWithShared<&AttentionBackwardKeyValueKernel<S>>(
        "AttentionBackwardKeyValueKernel", key_value_grid, key_value_shared_bytes, stream,
        static_cast<S*>(dqkv), static_cast<const S*>(dout), static_cast<const S*>(qkv),
        static_cast<const S*>(out), stats, T, C, NH, NKV, scale);
  });
}

// One block per query head: the scores of its query against every key (into `scores`),
// their softmax, then each thread one or more output channels summed over the keys in order.
template <typename S>
__global__ void AttentionDecodeKernel(S* out, float* scores, const S* qkv, int T, int C, int NH,
                                      int NKV, float scale) {
  __shared__ float scratch[kWarpSize];
  const int h = blockIdx.x, hs = C / NH, g = h / (NH / NKV);
  const size_t row = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * hs;
  const S* query = qkv + static_cast<size_t>(T - 1) * row + h * hs;
  const S* keys = qkv + C + g * hs;
  const S* values = qkv + C + static_cast<size_t>(NKV) * hs + g * hs;
  float* score = scores + static_cast<size_t>(h) * T;
  float local_max = -INFINITY;
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    float dot = 0.0f;
    for (int d = 0; d < hs; ++d) dot += DeviceLoad(query + d) * DeviceLoad(keys + t * row + d);
    score[t] = dot * scale;
    local_max = fmaxf(local_max, score[t]);
  }
  const float max_score = BlockMax(local_max, scratch);
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    const float p = expf(score[t] - max_score);
    score[t] = p;
    local_sum += p;
  }
  const float sum = BlockSum(local_sum, scratch);  // ends with a barrier: every p is written
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < T; ++t) acc += score[t] * DeviceLoad(values + t * row + d);
    DeviceStore(out + h * hs + d, acc / sum);
  }
}

Status AttentionDecode(DType dtype, void* out, const void* qkv, int T, int C, int NH, int NKV,
                       cudaStream_t stream) {
  if (T == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* scores = nullptr;
  const size_t scores_bytes = sizeof(float) * static_cast<size_t>(NH) * T;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&scores), scores_bytes, stream),
                       "allocating attention decode scores");
  Status launched = DispatchStorage(dtype, [&](auto tag) {
    using S = decltype(tag);
    ::strata::cuda::Launch<&AttentionDecodeKernel<S>>(NH, 128, 0, stream, static_cast<S*>(out),
                                                      scores, static_cast<const S*>(qkv), T, C, NH,
                                                      NKV, scale);
    return LaunchStatus("AttentionDecodeKernel", static_cast<size_t>(NH) * T);
  });
  CUDA_RETURN_IF_ERROR(cudaFreeAsync(scores, stream), "freeing attention decode scores");
  return launched;
}

}  // namespace strata::cuda_kernels
