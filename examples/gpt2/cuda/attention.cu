// FlashAttention-2 (Dao, 2023) for heads of 64: float32 on the CUDA cores,
// and bf16's first version on nvcuda::wmma (attention_mma.cu has the bf16
// kernels the model runs).
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

#include "attention_tiles.cuh"

namespace infini::examples::gpt2::gpu {
namespace {

using namespace attention_detail;
namespace wmma = nvcuda::wmma;

// ---- A warp's 16 × 64 products: tensor cores for bf16 ----

using FragmentA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragmentBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragmentBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// A warp's 16 × 64 float accumulator, in registers.
struct WmmaRows {
  Accumulator part[kHead / 16];  // columns 16n..16n+15
};
__device__ __forceinline__ void Zero(WmmaRows& rows) {
#pragma unroll
  for (int n = 0; n < kHead / 16; ++n) wmma::fill_fragment(rows.part[n], 0.0f);
}
// From / to the warp's 16 rows of a float tile.
__device__ __forceinline__ void LoadRows(WmmaRows& rows, const float* tile) {
#pragma unroll
  for (int n = 0; n < kHead / 16; ++n) {
    wmma::load_matrix_sync(rows.part[n], tile + n * 16, kFloatLd, wmma::mem_row_major);
  }
}
__device__ __forceinline__ void StoreRows(float* tile, const WmmaRows& rows) {
#pragma unroll
  for (int n = 0; n < kHead / 16; ++n) {
    wmma::store_matrix_sync(tile + n * 16, rows.part[n], kFloatLd, wmma::mem_row_major);
  }
}

// The warp's 16 × 64 float tile `out` = A (16 × 64, rows of `a`) · Bᵀ where
// B is 64 × 64 rows of `b` (both padded tiles): out[i][j] = a_i · b_j.
__device__ __forceinline__ void ProductTransposed(float* out, const bf16* a, const bf16* b) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    Accumulator accumulator;
    wmma::fill_fragment(accumulator, 0.0f);
#pragma unroll
    for (int k = 0; k < kHead / 16; ++k) {
      FragmentA a_fragment;
      FragmentBCol b_fragment;
      wmma::load_matrix_sync(a_fragment, a + k * 16, kLd<bf16>);
      wmma::load_matrix_sync(b_fragment, b + n * 16 * kLd<bf16> + k * 16, kLd<bf16>);
      wmma::mma_sync(accumulator, a_fragment, b_fragment, accumulator);
    }
    wmma::store_matrix_sync(out + n * 16, accumulator, kFloatLd, wmma::mem_row_major);
  }
}

// rows += A (16 × 64, rows of `a`) · B (64 × 64 rows of `b`).
__device__ __forceinline__ void ProductAccumulate(WmmaRows& rows, const bf16* a, const bf16* b) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    FragmentA a_fragment;
    wmma::load_matrix_sync(a_fragment, a + k * 16, kLd<bf16>);
#pragma unroll
    for (int n = 0; n < kHead / 16; ++n) {
      FragmentBRow b_fragment;
      wmma::load_matrix_sync(b_fragment, b + k * 16 * kLd<bf16> + n * 16, kLd<bf16>);
      wmma::mma_sync(rows.part[n], a_fragment, b_fragment, rows.part[n]);
    }
  }
}

// ---- The same in float32 on the CUDA cores (no TF32) ----

// Lane l holds rows l/8 + 4i and columns l%8 + 8j (i < 4, j < 8): the eight
// lanes of a quarter-warp read eight rows 4 banks apart, or eight adjacent
// columns.
struct SimtRows {
  float value[4][8];
};
struct SimtLane {
  int row, column;
};
__device__ __forceinline__ SimtLane ThisSimtLane() {
  const int lane = threadIdx.x % 32;
  return {lane / 8, lane % 8};
}
__device__ __forceinline__ void Zero(SimtRows& rows) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) rows.value[i][j] = 0.0f;
  }
}
__device__ __forceinline__ void StoreRows(float* tile, const SimtRows& rows) {
  const SimtLane lane = ThisSimtLane();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      tile[(lane.row + 4 * i) * kFloatLd + lane.column + 8 * j] = rows.value[i][j];
    }
  }
}

__device__ __forceinline__ void ProductTransposed(float* out, const float* a, const float* b) {
  const SimtLane lane = ThisSimtLane();
  SimtRows rows;
  Zero(rows);
#pragma unroll 4
  for (int k = 0; k < kHead; k += 4) {
    float4 a_values[4], b_values[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a_values[i] = *reinterpret_cast<const float4*>(a + (lane.row + 4 * i) * kLd<float> + k);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      b_values[j] = *reinterpret_cast<const float4*>(b + (lane.column + 8 * j) * kLd<float> + k);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float sum = rows.value[i][j];
        sum = fmaf(a_values[i].x, b_values[j].x, sum);
        sum = fmaf(a_values[i].y, b_values[j].y, sum);
        sum = fmaf(a_values[i].z, b_values[j].z, sum);
        rows.value[i][j] = fmaf(a_values[i].w, b_values[j].w, sum);
      }
    }
  }
  StoreRows(out, rows);
}

__device__ __forceinline__ void ProductAccumulate(SimtRows& rows, const float* a, const float* b) {
  const SimtLane lane = ThisSimtLane();
#pragma unroll 2
  for (int k = 0; k < kTile; k += 4) {
    float4 a_values[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a_values[i] = *reinterpret_cast<const float4*>(a + (lane.row + 4 * i) * kLd<float> + k);
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      float b_values[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) b_values[j] = b[(k + kk) * kLd<float> + lane.column + 8 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float a_value = kk == 0   ? a_values[i].x
                              : kk == 1 ? a_values[i].y
                              : kk == 2 ? a_values[i].z
                                        : a_values[i].w;
#pragma unroll
        for (int j = 0; j < 8; ++j) rows.value[i][j] = fmaf(a_value, b_values[j], rows.value[i][j]);
      }
    }
  }
}

// rows += Aᵀ · B over 64 k, A's 16 columns from `a_columns` (64 rows of a
// float tile: a[k][i] at a_columns[k · kFloatLd + i]) and B 64 × 64 rows of
// `b`: the dQ part dS · K from dSᵀ as the backward holds it.
__device__ __forceinline__ void ProductTransposedAAccumulate(SimtRows& rows, const float* a_columns,
                                                             const float* b) {
  const SimtLane lane = ThisSimtLane();
#pragma unroll 4
  for (int k = 0; k < kTile; ++k) {
    float a_values[4], b_values[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) a_values[i] = a_columns[k * kFloatLd + lane.row + 4 * i];
#pragma unroll
    for (int j = 0; j < 8; ++j) b_values[j] = b[k * kLd<float> + lane.column + 8 * j];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        rows.value[i][j] = fmaf(a_values[i], b_values[j], rows.value[i][j]);
    }
  }
}

template <typename E>
using WarpRows = std::conditional_t<std::is_same_v<E, float>, SimtRows, WmmaRows>;

// In float the forward keeps O in registers (SIMT rows) and each row's
// factor reaches them through row_factors (the first 64 floats of o_tile);
// wmma's accumulator layout is unknown, so bf16 rescales O in o_tile.
template <typename E>
__host__ __device__ constexpr bool OutputInRegisters() {
  return std::is_same_v<E, float>;
}

// Writes the warp's rows (16 × 64), times `scale`, as E rows of
// `destination` (rows `row_stride` apart, `valid_rows` of them) through the
// warp's float tile `staging`.
template <typename E>
__device__ __forceinline__ void WarpStoreRows(E* destination, int64_t row_stride, int valid_rows,
                                              const WarpRows<E>& rows, float scale,
                                              float* staging) {
  StoreRows(staging, rows);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < kWarpRows * kHead / 2; i += 32) {
    const int row = i / (kHead / 2), column = (i % (kHead / 2)) * 2;
    if (row >= valid_rows) continue;
    const float* from = staging + row * kFloatLd + column;
    StorePair(destination + row * row_stride + column, from[0] * scale, from[1] * scale);
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

template <typename E>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(E* out, float* logsumexp, const E* qkv, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  E* q_tile = reinterpret_cast<E*>(shared);
  E* k_tile = q_tile + TileElements<E>();
  E* v_tile = k_tile + TileElements<E>();
  float* s_tile =
      reinterpret_cast<float*>(v_tile + TileElements<E>() * (1 + OwnProbabilityTiles<E>()));
  float* o_tile = s_tile + kFloatTile;
  // In float the probabilities overwrite their scores (same layout).
  E* p_tile = OwnProbabilityTiles<E>() ? v_tile + TileElements<E>() : reinterpret_cast<E*>(s_tile);

  const int tiles = (T + kTile - 1) / kTile;
  const int query_tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const E* base = qkv + static_cast<int64_t>(b) * T * stride + h * kHead;
  const int q0 = query_tile * kTile;
  LoadTile(q_tile, base + q0 * stride, stride, T - q0);

  const int warp = threadIdx.x / 32;
  const RowLane lane = ThisRowLane();
  const int warp_row0 = warp * kWarpRows;
  float* s_row = s_tile + (warp_row0 + lane.row) * kFloatLd;
  float* o_row = o_tile + (warp_row0 + lane.row) * kFloatLd;
  E* p_row = p_tile + (warp_row0 + lane.row) * kLd<E>;
  constexpr bool kOutputInRegisters = OutputInRegisters<E>();
  float* row_factors = o_tile;
  WarpRows<E> output;
  if constexpr (kOutputInRegisters) {
    Zero(output);
  } else {
    for (int i = 0; i < 32; ++i) o_row[lane.half + 2 * i] = 0.0f;
  }
  const int query = q0 + warp_row0 + lane.row;
  float row_max = -INFINITY, row_sum = 0.0f;

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    __syncthreads();  // the last tile's K and V are used up
    LoadTile(k_tile, base + C + k0 * stride, stride, T - k0);
    LoadTile(v_tile, base + 2 * C + k0 * stride, stride, T - k0);
    __syncthreads();
    ProductTransposed(s_tile + warp_row0 * kFloatLd, q_tile + warp_row0 * kLd<E>, k_tile);
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
      p_row[column] = FromFloat<E>(p);
      if constexpr (!kOutputInRegisters) o_row[column] *= rescale;
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    row_sum = row_sum * rescale + tile_sum;
    row_max = new_max;
    if constexpr (kOutputInRegisters) {
      if (lane.half == 0) row_factors[warp_row0 + lane.row] = rescale;
    }
    __syncwarp();
    // O += P·V: in float the rows are rescaled in registers; in bf16 the
    // accumulator round-trips through o_tile, whose rows were rescaled.
    if constexpr (kOutputInRegisters) {
      const SimtLane simt = ThisSimtLane();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float factor = row_factors[warp_row0 + simt.row + 4 * i];
#pragma unroll
        for (int j = 0; j < 8; ++j) output.value[i][j] *= factor;
      }
      ProductAccumulate(output, p_tile + warp_row0 * kLd<E>, v_tile);
    } else {
      LoadRows(output, o_tile + warp_row0 * kFloatLd);
      ProductAccumulate(output, p_tile + warp_row0 * kLd<E>, v_tile);
      StoreRows(o_tile + warp_row0 * kFloatLd, output);
    }
    __syncwarp();
  }
  if constexpr (kOutputInRegisters) {
    // O / row sum from the SIMT rows: the sums reach them as the factors did.
    if (lane.half == 0) row_factors[warp_row0 + lane.row] = 1.0f / row_sum;
    __syncwarp();
    const SimtLane simt = ThisSimtLane();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = warp_row0 + simt.row + 4 * i;
      if (q0 + row >= T) continue;
      const float inverse = row_factors[row];
      E* out_row = out + (static_cast<int64_t>(b) * T + q0 + row) * C + h * kHead;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        out_row[simt.column + 8 * j] = FromFloat<E>(output.value[i][j] * inverse);
      }
    }
    if (query < T && lane.half == 0) {
      logsumexp[static_cast<int64_t>(bh) * T + query] = row_max + log2f(row_sum);
    }
    return;
  }
  if (query >= T) return;
  const float inverse = 1.0f / row_sum;
  E* out_row = out + (static_cast<int64_t>(b) * T + query) * C + h * kHead;
  for (int i = 0; i < 16; ++i) {
    const int column = lane.half * 32 + 2 * i;  // contiguous halves for the global stores
    StorePair(out_row + column, o_row[column] * inverse, o_row[column + 1] * inverse);
  }
  if (lane.half == 0) logsumexp[static_cast<int64_t>(bh) * T + query] = row_max + log2f(row_sum);
}

// dK and dV of one key tile, over the query tiles from the diagonal down.
// The warp's rows are keys: it forms Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, then
// dV += Pᵀ·dO and dK += dSᵀ·Q with dSᵀ = Pᵀ ∘ (dPᵀ − D).
// kAccumulatesQueries (float only): also adds the block's part of dQ =
// dS·K (its 64 keys) into d_qkv's Q part with atomics (zeroed before), so
// that no second kernel recomputes S and dP.
template <typename E, bool kAccumulatesQueries = false>
__global__ void __launch_bounds__(kThreads)
    KeyValueGradientKernel(E* d_qkv, const E* d_out, const E* qkv, const float* logsumexp,
                           const float* dots, int T, int NH) {
  static_assert(!kAccumulatesQueries || std::is_same_v<E, float>);
  extern __shared__ __align__(128) unsigned char shared[];
  E* k_tile = reinterpret_cast<E*>(shared);
  E* v_tile = k_tile + TileElements<E>();
  E* q_tile = v_tile + TileElements<E>();
  E* do_tile = q_tile + TileElements<E>();
  E* p_tile = do_tile + TileElements<E>();
  float* f_tile =
      reinterpret_cast<float*>(p_tile + TileElements<E>() * (1 + OwnProbabilityTiles<E>()));
  // In float dS overwrites dP (same layout).
  E* ds_tile = OwnProbabilityTiles<E>() ? p_tile + TileElements<E>() : reinterpret_cast<E*>(f_tile);
  float* lse_row = f_tile + kFloatTile;
  float* dot_row = lse_row + kTile;

  const int tiles = (T + kTile - 1) / kTile;
  const int key_tile = static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t batch_offset = static_cast<int64_t>(b) * T * stride + h * kHead;
  const E* base = qkv + batch_offset;
  const E* d_out_base = d_out + static_cast<int64_t>(b) * T * C + h * kHead;
  const int k0 = key_tile * kTile;
  LoadTile(k_tile, base + C + k0 * stride, stride, T - k0);
  LoadTile(v_tile, base + 2 * C + k0 * stride, stride, T - k0);

  const int warp = threadIdx.x / 32;
  const RowLane lane = ThisRowLane();
  const int warp_row0 = warp * kWarpRows;
  float* f_row = f_tile + (warp_row0 + lane.row) * kFloatLd;
  E* p_row = p_tile + (warp_row0 + lane.row) * kLd<E>;
  E* ds_row = ds_tile + (warp_row0 + lane.row) * kLd<E>;
  const int key = k0 + warp_row0 + lane.row;
  WarpRows<E> d_k, d_v;
  Zero(d_k);
  Zero(d_v);
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
    ProductTransposed(f_tile + warp_row0 * kFloatLd, k_tile + warp_row0 * kLd<E>, q_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i, query = q0 + column;
      p[i] = query >= key && query < T ? exp2f(f_row[column] * kScaleLog2 - lse_row[column]) : 0.0f;
      p_row[column] = FromFloat<E>(p[i]);
    }
    __syncwarp();
    ProductTransposed(f_tile + warp_row0 * kFloatLd, v_tile + warp_row0 * kLd<E>, do_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      ds_row[column] = FromFloat<E>(p[i] * (f_row[column] - dot_row[column]));
    }
    __syncwarp();
    ProductAccumulate(d_v, p_tile + warp_row0 * kLd<E>, do_tile);
    ProductAccumulate(d_k, ds_tile + warp_row0 * kLd<E>, q_tile);
    if constexpr (kAccumulatesQueries) {
      __syncthreads();  // every warp's dSᵀ rows are in f_tile
      // This warp's 16 queries are columns warp_row0.. of dSᵀ.
      SimtRows d_q;
      Zero(d_q);
      ProductTransposedAAccumulate(d_q, f_tile + warp_row0, k_tile);
      const SimtLane simt = ThisSimtLane();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int query = q0 + warp_row0 + simt.row + 4 * i;
        if (query >= T) continue;
        E* row = d_qkv + batch_offset + query * stride + simt.column;
#pragma unroll
        for (int j = 0; j < 8; ++j) atomicAdd(row + 8 * j, kScale * d_q.value[i][j]);
      }
    }
  }
  // Other warps may still read every row of f_tile for their dQ: the
  // staging below overwrites this warp's rows.
  if constexpr (kAccumulatesQueries) __syncthreads();
  E* d_base = d_qkv + batch_offset + (k0 + warp_row0) * stride;
  const int valid_rows = T - (k0 + warp_row0);
  float* staging = f_tile + warp_row0 * kFloatLd;
  WarpStoreRows<E>(d_base + C, stride, valid_rows, d_k, kScale, staging);
  WarpStoreRows<E>(d_base + 2 * C, stride, valid_rows, d_v, 1.0f, staging);
}

// dQ of one query tile, over the key tiles up to the diagonal: S = Q·Kᵀ,
// dP = dO·Vᵀ, dS = P ∘ (dP − D), dQ += dS·K.
template <typename E>
__global__ void __launch_bounds__(kThreads)
    QueryGradientKernel(E* d_qkv, const E* d_out, const E* qkv, const float* logsumexp,
                        const float* dots, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  E* q_tile = reinterpret_cast<E*>(shared);
  E* do_tile = q_tile + TileElements<E>();
  E* k_tile = do_tile + TileElements<E>();
  E* v_tile = k_tile + TileElements<E>();
  float* f_tile =
      reinterpret_cast<float*>(v_tile + TileElements<E>() * (1 + OwnProbabilityTiles<E>()));
  // In float dS overwrites dP (same layout).
  E* ds_tile = OwnProbabilityTiles<E>() ? v_tile + TileElements<E>() : reinterpret_cast<E*>(f_tile);

  const int tiles = (T + kTile - 1) / kTile;
  const int query_tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t batch_offset = static_cast<int64_t>(b) * T * stride + h * kHead;
  const E* base = qkv + batch_offset;
  const int q0 = query_tile * kTile;
  LoadTile(q_tile, base + q0 * stride, stride, T - q0);
  LoadTile(do_tile, d_out + (static_cast<int64_t>(b) * T + q0) * C + h * kHead, C, T - q0);

  const int warp = threadIdx.x / 32;
  const RowLane lane = ThisRowLane();
  const int warp_row0 = warp * kWarpRows;
  float* f_row = f_tile + (warp_row0 + lane.row) * kFloatLd;
  E* ds_row = ds_tile + (warp_row0 + lane.row) * kLd<E>;
  const int query = q0 + warp_row0 + lane.row;
  const bool valid = query < T;
  const float lse = valid ? logsumexp[static_cast<int64_t>(bh) * T + query] : 0.0f;
  const float dot = valid ? dots[static_cast<int64_t>(bh) * T + query] : 0.0f;
  WarpRows<E> d_q;
  Zero(d_q);
  float p[32];

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    __syncthreads();
    LoadTile(k_tile, base + C + k0 * stride, stride, T - k0);
    LoadTile(v_tile, base + 2 * C + k0 * stride, stride, T - k0);
    __syncthreads();
    ProductTransposed(f_tile + warp_row0 * kFloatLd, q_tile + warp_row0 * kLd<E>, k_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      // An invalid row (past T) gets 0 so that nothing there can overflow.
      p[i] = valid && k0 + column <= query ? exp2f(f_row[column] * kScaleLog2 - lse) : 0.0f;
    }
    __syncwarp();
    ProductTransposed(f_tile + warp_row0 * kFloatLd, do_tile + warp_row0 * kLd<E>, v_tile);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int column = lane.half + 2 * i;
      ds_row[column] = FromFloat<E>(p[i] * (f_row[column] - dot));
    }
    __syncwarp();
    ProductAccumulate(d_q, ds_tile + warp_row0 * kLd<E>, k_tile);
  }
  float* staging = f_tile + warp_row0 * kFloatLd;
  WarpStoreRows<E>(d_qkv + batch_offset + (q0 + warp_row0) * stride, stride, T - (q0 + warp_row0),
                   d_q, kScale, staging);
}

// Tiles of E, then the float tiles (and the lse and dot rows).
// (With O in registers the output's tile is only its 64 row factors.)
template <typename E>
constexpr size_t ForwardShared() {
  return sizeof(E) * TileElements<E>() * (3 + OwnProbabilityTiles<E>()) +
         sizeof(float) * (kFloatTile + (OutputInRegisters<E>() ? kTile : kFloatTile));
}
template <typename E>
constexpr size_t KeyValueShared() {
  return sizeof(E) * TileElements<E>() * (5 + OwnProbabilityTiles<E>()) +
         sizeof(float) * (kFloatTile + 2 * kTile);
}
template <typename E>
constexpr size_t QueryShared() {
  return sizeof(E) * TileElements<E>() * (4 + OwnProbabilityTiles<E>()) +
         sizeof(float) * kFloatTile;
}

template <typename E>
void Forward(E* out, float* logsumexp, const E* qkv, int64_t batch_size, int64_t sequence_length,
             int64_t num_heads, cudaStream_t stream) {
  AllowShared(ForwardKernel<E>, ForwardShared<E>());
  ForwardKernel<E>
      <<<TileGrid(batch_size, sequence_length, num_heads), kThreads, ForwardShared<E>(), stream>>>(
          out, logsumexp, qkv, static_cast<int>(sequence_length), static_cast<int>(num_heads));
}

template <typename E>
void Backward(E* d_qkv, float* scratch, const E* d_out, const E* qkv, const E* out,
              const float* logsumexp, int64_t batch_size, int64_t sequence_length,
              int64_t num_heads, cudaStream_t stream) {
  const int T = static_cast<int>(sequence_length), NH = static_cast<int>(num_heads);
  RowDots(scratch, d_out, out, batch_size * sequence_length * num_heads, T, NH, stream);
  const dim3 grid = TileGrid(batch_size, sequence_length, num_heads);
  AllowShared(KeyValueGradientKernel<E>, KeyValueShared<E>());
  KeyValueGradientKernel<E><<<grid, kThreads, KeyValueShared<E>(), stream>>>(
      d_qkv, d_out, qkv, logsumexp, scratch, T, NH);
  AllowShared(QueryGradientKernel<E>, QueryShared<E>());
  QueryGradientKernel<E>
      <<<grid, kThreads, QueryShared<E>(), stream>>>(d_qkv, d_out, qkv, logsumexp, scratch, T, NH);
}

}  // namespace

void FusedAttentionBackwardAccumulatingQueries(float* d_qkv, float* scratch, const float* d_out,
                                               const float* qkv, const float* out,
                                               const float* logsumexp, int64_t batch_size,
                                               int64_t sequence_length, int64_t num_heads,
                                               cudaStream_t stream) {
  const int T = static_cast<int>(sequence_length), NH = static_cast<int>(num_heads);
  const int64_t rows = batch_size * sequence_length;
  RowDots(scratch, d_out, out, rows * num_heads, T, NH, stream);
  // The Q part gathers atomics; K and V are overwritten whole.
  cudaMemsetAsync(d_qkv, 0, static_cast<size_t>(rows * 3 * NH * kHead) * sizeof(float), stream);
  AllowShared(KeyValueGradientKernel<float, true>, KeyValueShared<float>());
  KeyValueGradientKernel<float, true>
      <<<TileGrid(batch_size, sequence_length, num_heads), kThreads, KeyValueShared<float>(),
         stream>>>(d_qkv, d_out, qkv, logsumexp, scratch, T, NH);
}

void FusedAttentionForwardWmma(__nv_bfloat16* out, float* logsumexp, const __nv_bfloat16* qkv,
                               int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                               cudaStream_t stream) {
  Forward(out, logsumexp, qkv, batch_size, sequence_length, num_heads, stream);
}
void FusedAttentionForward(float* out, float* logsumexp, const float* qkv, int64_t batch_size,
                           int64_t sequence_length, int64_t num_heads, cudaStream_t stream) {
  Forward(out, logsumexp, qkv, batch_size, sequence_length, num_heads, stream);
}

void FusedAttentionBackwardWmma(__nv_bfloat16* d_qkv, float* scratch, const __nv_bfloat16* d_out,
                                const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                                const float* logsumexp, int64_t batch_size, int64_t sequence_length,
                                int64_t num_heads, cudaStream_t stream) {
  Backward(d_qkv, scratch, d_out, qkv, out, logsumexp, batch_size, sequence_length, num_heads,
           stream);
}
void FusedAttentionBackward(float* d_qkv, float* scratch, const float* d_out, const float* qkv,
                            const float* out, const float* logsumexp, int64_t batch_size,
                            int64_t sequence_length, int64_t num_heads, cudaStream_t stream) {
  Backward(d_qkv, scratch, d_out, qkv, out, logsumexp, batch_size, sequence_length, num_heads,
           stream);
}

}  // namespace infini::examples::gpt2::gpu
