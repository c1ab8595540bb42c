// FlashAttention-2 (Dao, 2023) for bfloat16 heads of 64, with nvcuda::wmma.
//
// Every kernel works on tiles of 64 query rows × 64 keys with 4 warps; each
// warp owns 16 rows of the tile (query rows in the forward and in dQ, key
// rows in dK/dV). Scores leave the tensor cores through a per-warp float
// tile in shared memory, where two lanes per row apply the causal mask and
// the softmax; tiles above the diagonal are never visited. Scores are kept
// in log2 units (scaled by log2(e)/sqrt(64)) so that exp2f does the
// exponentials.
//
// The backward runs two kernels rather than FlashAttention-2's one with
// atomic dQ: one per key tile accumulates dK and dV over the query tiles at
// or below the diagonal, one per query tile accumulates dQ over the key
// tiles. It recomputes the scores twice but needs no float dQ buffer and
// sums in a fixed order (deterministic).
#include <mma.h>

#include <cmath>

#include "attention.h"

namespace infini::examples::gpt2::gpu {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kHead = static_cast<int>(kFusedAttentionHeadSize);
constexpr int kTile = 64;  // query rows and keys per tile
constexpr int kWarps = 4;  // 16 rows each
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kTile / kWarps;
constexpr int kHalfLd = kHead + 8;  // bf16 tile row, padded against bank conflicts
constexpr int kFloatLd = kTile + 4;
constexpr int kHalfTile = kTile * kHalfLd;    // elements
constexpr int kFloatTile = kTile * kFloatLd;  // elements
static_assert(kHead == kTile, "the tiles are square: 64 keys and 64 head features");

using FragmentA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragmentBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragmentBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// log2(e) / sqrt(64): scores in log2 units.
constexpr float kScaleLog2 = 1.4426950408889634f / 8.0f;
constexpr float kScale = 1.0f / 8.0f;

// 64 rows of 64 bf16 from `source` (rows `row_stride` apart) into a padded
// shared tile; rows from `valid_rows` on are zero.
__device__ __forceinline__ void LoadTile(bf16* tile, const bf16* source, int64_t row_stride,
                                         int valid_rows) {
  constexpr int kChunksPerRow = kHead / 8;  // 16 bytes each
  for (int i = threadIdx.x; i < kTile * kChunksPerRow; i += kThreads) {
    const int row = i / kChunksPerRow, column = (i % kChunksPerRow) * 8;
    uint4 chunk = make_uint4(0, 0, 0, 0);
    if (row < valid_rows)
      chunk = *reinterpret_cast<const uint4*>(source + row * row_stride + column);
    *reinterpret_cast<uint4*>(tile + row * kHalfLd + column) = chunk;
  }
}

// The warp's 16 × 64 float tile `out` = A (16 × 64, rows of `a`) · Bᵀ where
// B is 64 × 64 rows of `b` (both padded bf16 tiles): out[i][j] = a_i · b_j.
__device__ __forceinline__ void WarpProductTransposed(float* out, const bf16* a, const bf16* b) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    Accumulator accumulator;
    wmma::fill_fragment(accumulator, 0.0f);
#pragma unroll
    for (int k = 0; k < kHead / 16; ++k) {
      FragmentA a_fragment;
      FragmentBCol b_fragment;
      wmma::load_matrix_sync(a_fragment, a + k * 16, kHalfLd);
      wmma::load_matrix_sync(b_fragment, b + n * 16 * kHalfLd + k * 16, kHalfLd);
      wmma::mma_sync(accumulator, a_fragment, b_fragment, accumulator);
    }
    wmma::store_matrix_sync(out + n * 16, accumulator, kFloatLd, wmma::mem_row_major);
  }
}

// accumulators[n] += A (16 × 64, rows of `a`) · B (64 × 64 rows of `b`),
// columns 16n..16n+15.
__device__ __forceinline__ void WarpProductAccumulate(Accumulator (&accumulators)[kHead / 16],
                                                      const bf16* a, const bf16* b) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    FragmentA a_fragment;
    wmma::load_matrix_sync(a_fragment, a + k * 16, kHalfLd);
#pragma unroll
    for (int n = 0; n < kHead / 16; ++n) {
      FragmentBRow b_fragment;
      wmma::load_matrix_sync(b_fragment, b + k * 16 * kHalfLd + n * 16, kHalfLd);
      wmma::mma_sync(accumulators[n], a_fragment, b_fragment, accumulators[n]);
    }
  }
}

// Writes the warp's accumulators (16 rows × 64), times `scale`, as bf16 rows
// of `destination` (rows `row_stride` apart, `valid_rows` of them) through
// the warp's float tile `staging`.
__device__ __forceinline__ void WarpStoreRows(bf16* destination, int64_t row_stride, int valid_rows,
                                              Accumulator (&accumulators)[kHead / 16], float scale,
                                              float* staging) {
#pragma unroll
  for (int n = 0; n < kHead / 16; ++n) {
    wmma::store_matrix_sync(staging + n * 16, accumulators[n], kFloatLd, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < kWarpRows * kHead / 2; i += 32) {
    const int row = i / (kHead / 2), column = (i % (kHead / 2)) * 2;
    if (row >= valid_rows) continue;
    const float* from = staging + row * kFloatLd + column;
    *reinterpret_cast<__nv_bfloat162*>(destination + row * row_stride + column) =
        __floats2bfloat162_rn(from[0] * scale, from[1] * scale);
  }
  __syncwarp();
}

// Lane → (row of the warp's 16, which of the two interleaved column halves):
// column c = half + 2i for i < 32 keeps the two lanes of a row on different
// banks.
struct RowLane {
  int row, half;
};
__device__ __forceinline__ RowLane ThisRowLane() {
  const int lane = threadIdx.x % 32;
  return {lane / 2, lane % 2};
}

__global__ void __launch_bounds__(kThreads)
    ForwardKernel(bf16* out, float* logsumexp, const bf16* qkv, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared);
  bf16* k_tile = q_tile + kHalfTile;
  bf16* v_tile = k_tile + kHalfTile;
  bf16* p_tile = v_tile + kHalfTile;
  float* s_tile = reinterpret_cast<float*>(p_tile + kHalfTile);
  float* o_tile = s_tile + kFloatTile;

  const int tiles = (T + kTile - 1) / kTile;
  const int query_tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const bf16* base = qkv + static_cast<int64_t>(b) * T * stride + h * kHead;
  const int q0 = query_tile * kTile;
  LoadTile(q_tile, base + q0 * stride, stride, T - q0);

  const int warp = threadIdx.x / 32;
  const RowLane lane = ThisRowLane();
  const int warp_row0 = warp * kWarpRows;
  float* s_row = s_tile + (warp_row0 + lane.row) * kFloatLd;
  float* o_row = o_tile + (warp_row0 + lane.row) * kFloatLd;
  bf16* p_row = p_tile + (warp_row0 + lane.row) * kHalfLd;
  for (int i = 0; i < 32; ++i) o_row[lane.half + 2 * i] = 0.0f;
  const int query = q0 + warp_row0 + lane.row;
  float row_max = -INFINITY, row_sum = 0.0f;

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    __syncthreads();  // the last tile's K and V are used up
    LoadTile(k_tile, base + C + k0 * stride, stride, T - k0);
    LoadTile(v_tile, base + 2 * C + k0 * stride, stride, T - k0);
    __syncthreads();
    WarpProductTransposed(s_tile + warp_row0 * kFloatLd, q_tile + warp_row0 * kHalfLd, k_tile);
    __syncwarp();
    // Online softmax of this row's 64 new scores (2 lanes, 32 columns each).
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      const float score = k0 + column <= query ? s_row[column] * kScaleLog2 : -INFINITY;
      s_row[column] = score;
      tile_max = fmaxf(tile_max, score);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    // Key k0 <= query always: the maximum is finite.
    const float new_max = fmaxf(row_max, tile_max);
    const float rescale = exp2f(row_max - new_max);
    float tile_sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      const float p = exp2f(s_row[column] - new_max);
      tile_sum += p;
      p_row[column] = __float2bfloat16(p);
      o_row[column] *= rescale;
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    row_sum = row_sum * rescale + tile_sum;
    row_max = new_max;
    __syncwarp();
    // O += P·V, the accumulator round-tripping through the float tile (its
    // rows had to be rescaled).
    Accumulator accumulators[kHead / 16];
#pragma unroll
    for (int n = 0; n < kHead / 16; ++n) {
      wmma::load_matrix_sync(accumulators[n], o_tile + warp_row0 * kFloatLd + n * 16, kFloatLd,
                             wmma::mem_row_major);
    }
    WarpProductAccumulate(accumulators, p_tile + warp_row0 * kHalfLd, v_tile);
#pragma unroll
    for (int n = 0; n < kHead / 16; ++n) {
      wmma::store_matrix_sync(o_tile + warp_row0 * kFloatLd + n * 16, accumulators[n], kFloatLd,
                              wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (query >= T) return;
  const float inverse = 1.0f / row_sum;
  bf16* out_row = out + (static_cast<int64_t>(b) * T + query) * C + h * kHead;
  for (int i = 0; i < 16; ++i) {
    const int column = lane.half * 32 + 2 * i;  // contiguous halves for the global stores
    *reinterpret_cast<__nv_bfloat162*>(out_row + column) =
        __floats2bfloat162_rn(o_row[column] * inverse, o_row[column + 1] * inverse);
  }
  if (lane.half == 0) logsumexp[static_cast<int64_t>(bh) * T + query] = row_max + log2f(row_sum);
}

// scratch[(b·NH + h)·T + t] = Σ_d d_out·out over the head's 64 features: one
// warp per (b, t, h).
__global__ void RowDotKernel(float* dots, const bf16* d_out, const bf16* out, int64_t rows, int T,
                             int NH) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int h = static_cast<int>(row % NH);
  const int64_t bt = row / NH;
  const int64_t offset = row * kHead + 2 * lane;
  const __nv_bfloat162 g = *reinterpret_cast<const __nv_bfloat162*>(d_out + offset);
  const __nv_bfloat162 o = *reinterpret_cast<const __nv_bfloat162*>(out + offset);
  float dot = __low2float(g) * __low2float(o) + __high2float(g) * __high2float(o);
  for (int step = 16; step > 0; step /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, step);
  if (lane == 0) {
    const int64_t b = bt / T, t = bt % T;
    dots[(b * NH + h) * T + t] = dot;
  }
}

// dK and dV of one key tile, over the query tiles from the diagonal down.
// The warp's rows are keys: it forms Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, then
// dV += Pᵀ·dO and dK += dSᵀ·Q with dSᵀ = Pᵀ ∘ (dPᵀ − D).
__global__ void __launch_bounds__(kThreads)
    KeyValueGradientKernel(bf16* d_qkv, const bf16* d_out, const bf16* qkv, const float* logsumexp,
                           const float* dots, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* k_tile = reinterpret_cast<bf16*>(shared);
  bf16* v_tile = k_tile + kHalfTile;
  bf16* q_tile = v_tile + kHalfTile;
  bf16* do_tile = q_tile + kHalfTile;
  bf16* p_tile = do_tile + kHalfTile;
  bf16* ds_tile = p_tile + kHalfTile;
  float* f_tile = reinterpret_cast<float*>(ds_tile + kHalfTile);
  float* lse_row = f_tile + kFloatTile;
  float* dot_row = lse_row + kTile;

  const int tiles = (T + kTile - 1) / kTile;
  const int key_tile = static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t batch_offset = static_cast<int64_t>(b) * T * stride + h * kHead;
  const bf16* base = qkv + batch_offset;
  const bf16* d_out_base = d_out + static_cast<int64_t>(b) * T * C + h * kHead;
  const int k0 = key_tile * kTile;
  LoadTile(k_tile, base + C + k0 * stride, stride, T - k0);
  LoadTile(v_tile, base + 2 * C + k0 * stride, stride, T - k0);

  const int warp = threadIdx.x / 32;
  const RowLane lane = ThisRowLane();
  const int warp_row0 = warp * kWarpRows;
  float* f_row = f_tile + (warp_row0 + lane.row) * kFloatLd;
  bf16* p_row = p_tile + (warp_row0 + lane.row) * kHalfLd;
  bf16* ds_row = ds_tile + (warp_row0 + lane.row) * kHalfLd;
  const int key = k0 + warp_row0 + lane.row;
  Accumulator d_k[kHead / 16], d_v[kHead / 16];
#pragma unroll
  for (int n = 0; n < kHead / 16; ++n) {
    wmma::fill_fragment(d_k[n], 0.0f);
    wmma::fill_fragment(d_v[n], 0.0f);
  }
  float p[32];

  for (int query_tile = key_tile; query_tile < tiles; ++query_tile) {
    const int q0 = query_tile * kTile;
    __syncthreads();  // the last query tile is used up
    LoadTile(q_tile, base + q0 * stride, stride, T - q0);
    LoadTile(do_tile, d_out_base + q0 * static_cast<int64_t>(C), C, T - q0);
    if (threadIdx.x < kTile) {
      const int query = q0 + static_cast<int>(threadIdx.x);
      lse_row[threadIdx.x] = query < T ? logsumexp[static_cast<int64_t>(bh) * T + query] : 0.0f;
      dot_row[threadIdx.x] = query < T ? dots[static_cast<int64_t>(bh) * T + query] : 0.0f;
    }
    __syncthreads();
    WarpProductTransposed(f_tile + warp_row0 * kFloatLd, k_tile + warp_row0 * kHalfLd, q_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i, query = q0 + column;
      p[i] = query >= key && query < T ? exp2f(f_row[column] * kScaleLog2 - lse_row[column]) : 0.0f;
      p_row[column] = __float2bfloat16(p[i]);
    }
    __syncwarp();
    WarpProductTransposed(f_tile + warp_row0 * kFloatLd, v_tile + warp_row0 * kHalfLd, do_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      ds_row[column] = __float2bfloat16(p[i] * (f_row[column] - dot_row[column]));
    }
    __syncwarp();
    WarpProductAccumulate(d_v, p_tile + warp_row0 * kHalfLd, do_tile);
    WarpProductAccumulate(d_k, ds_tile + warp_row0 * kHalfLd, q_tile);
  }
  bf16* d_base = d_qkv + batch_offset + (k0 + warp_row0) * stride;
  const int valid_rows = T - (k0 + warp_row0);
  float* staging = f_tile + warp_row0 * kFloatLd;
  WarpStoreRows(d_base + C, stride, valid_rows, d_k, kScale, staging);
  WarpStoreRows(d_base + 2 * C, stride, valid_rows, d_v, 1.0f, staging);
}

// dQ of one query tile, over the key tiles up to the diagonal: S = Q·Kᵀ,
// dP = dO·Vᵀ, dS = P ∘ (dP − D), dQ += dS·K.
__global__ void __launch_bounds__(kThreads)
    QueryGradientKernel(bf16* d_qkv, const bf16* d_out, const bf16* qkv, const float* logsumexp,
                        const float* dots, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared);
  bf16* do_tile = q_tile + kHalfTile;
  bf16* k_tile = do_tile + kHalfTile;
  bf16* v_tile = k_tile + kHalfTile;
  bf16* ds_tile = v_tile + kHalfTile;
  float* f_tile = reinterpret_cast<float*>(ds_tile + kHalfTile);

  const int tiles = (T + kTile - 1) / kTile;
  const int query_tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t batch_offset = static_cast<int64_t>(b) * T * stride + h * kHead;
  const bf16* base = qkv + batch_offset;
  const int q0 = query_tile * kTile;
  LoadTile(q_tile, base + q0 * stride, stride, T - q0);
  LoadTile(do_tile, d_out + (static_cast<int64_t>(b) * T + q0) * C + h * kHead, C, T - q0);

  const int warp = threadIdx.x / 32;
  const RowLane lane = ThisRowLane();
  const int warp_row0 = warp * kWarpRows;
  float* f_row = f_tile + (warp_row0 + lane.row) * kFloatLd;
  bf16* ds_row = ds_tile + (warp_row0 + lane.row) * kHalfLd;
  const int query = q0 + warp_row0 + lane.row;
  const bool valid = query < T;
  const float lse = valid ? logsumexp[static_cast<int64_t>(bh) * T + query] : 0.0f;
  const float dot = valid ? dots[static_cast<int64_t>(bh) * T + query] : 0.0f;
  Accumulator d_q[kHead / 16];
#pragma unroll
  for (int n = 0; n < kHead / 16; ++n) wmma::fill_fragment(d_q[n], 0.0f);
  float p[32];

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    __syncthreads();
    LoadTile(k_tile, base + C + k0 * stride, stride, T - k0);
    LoadTile(v_tile, base + 2 * C + k0 * stride, stride, T - k0);
    __syncthreads();
    WarpProductTransposed(f_tile + warp_row0 * kFloatLd, q_tile + warp_row0 * kHalfLd, k_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      // An invalid row (past T) gets 0 so that nothing there can overflow.
      p[i] = valid && k0 + column <= query ? exp2f(f_row[column] * kScaleLog2 - lse) : 0.0f;
    }
    __syncwarp();
    WarpProductTransposed(f_tile + warp_row0 * kFloatLd, do_tile + warp_row0 * kHalfLd, v_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      ds_row[column] = __float2bfloat16(p[i] * (f_row[column] - dot));
    }
    __syncwarp();
    WarpProductAccumulate(d_q, ds_tile + warp_row0 * kHalfLd, k_tile);
  }
  float* staging = f_tile + warp_row0 * kFloatLd;
  WarpStoreRows(d_qkv + batch_offset + (q0 + warp_row0) * stride, stride, T - (q0 + warp_row0), d_q,
                kScale, staging);
}

constexpr size_t kForwardShared = 4 * kHalfTile * sizeof(bf16) + 2 * kFloatTile * sizeof(float);
constexpr size_t kKeyValueShared =
    6 * kHalfTile * sizeof(bf16) + (kFloatTile + 2 * kTile) * sizeof(float);
constexpr size_t kQueryShared = 5 * kHalfTile * sizeof(bf16) + kFloatTile * sizeof(float);

// Above 48 KiB a kernel's dynamic shared memory must be asked for; once per
// process and device suffices, but asking again is cheap and keeps this
// free of state.
template <typename Kernel>
void AllowShared(Kernel kernel, size_t bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
}

dim3 TileGrid(int64_t batch_size, int64_t sequence_length, int64_t num_heads) {
  return dim3(static_cast<unsigned>((sequence_length + kTile - 1) / kTile),
              static_cast<unsigned>(batch_size * num_heads));
}

}  // namespace

void FusedAttentionForward(__nv_bfloat16* out, float* logsumexp, const __nv_bfloat16* qkv,
                           int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                           cudaStream_t stream) {
  AllowShared(ForwardKernel, kForwardShared);
  ForwardKernel<<<TileGrid(batch_size, sequence_length, num_heads), kThreads, kForwardShared,
                  stream>>>(out, logsumexp, qkv, static_cast<int>(sequence_length),
                            static_cast<int>(num_heads));
}

void FusedAttentionBackward(__nv_bfloat16* d_qkv, float* scratch, const __nv_bfloat16* d_out,
                            const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                            const float* logsumexp, int64_t batch_size, int64_t sequence_length,
                            int64_t num_heads, cudaStream_t stream) {
  const int T = static_cast<int>(sequence_length), NH = static_cast<int>(num_heads);
  const int64_t rows = batch_size * sequence_length * num_heads;
  constexpr int kRowsPerBlock = 8;
  RowDotKernel<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                 kRowsPerBlock * 32, 0, stream>>>(scratch, d_out, out, rows, T, NH);
  const dim3 grid = TileGrid(batch_size, sequence_length, num_heads);
  AllowShared(KeyValueGradientKernel, kKeyValueShared);
  KeyValueGradientKernel<<<grid, kThreads, kKeyValueShared, stream>>>(d_qkv, d_out, qkv, logsumexp,
                                                                      scratch, T, NH);
  AllowShared(QueryGradientKernel, kQueryShared);
  QueryGradientKernel<<<grid, kThreads, kQueryShared, stream>>>(d_qkv, d_out, qkv, logsumexp,
                                                                scratch, T, NH);
}

}  // namespace infini::examples::gpt2::gpu
