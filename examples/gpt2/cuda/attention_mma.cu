// The bf16 fused attention that the model runs: FlashAttention-2 on PTX
// mma.sync (see attention.cu for the algorithm and attention_tiles.cuh for
// the tile geometry they share).
#include <cuda_bf16.h>

#include "attention_tiles.cuh"

namespace infini::examples::gpt2::gpu {
namespace {

using namespace attention_detail;

// ---- The bf16 forward with mma.sync: scores, probabilities and the output
// stay in registers ----
//
// FlashAttention-2's own layout: PTX's m16n8k16 fragments (the PTX ISA
// documents which thread holds which element), operands from shared memory
// with ldmatrix. Thread t of a warp holds rows g = t/4 and g + 8 of the
// warp's 16 and, in every 8-column tile, columns 2(t%4) and 2(t%4) + 1; the
// four threads of a quad share their rows, so a row's max and sum need two
// shuffles. The probabilities of two adjacent key tiles are the A operand
// of P·V as they are, with no trip through shared memory.

__device__ __forceinline__ uint32_t SharedAddress(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}
// Four 8 × 8 bf16 matrices; lane i gives the address of row i % 8 of matrix
// i / 8, and gets in r[m] its two elements of matrix m (transposed: of its
// transpose).
__device__ __forceinline__ void LoadMatrices(uint32_t (&r)[4], const bf16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LoadMatricesTransposed(uint32_t (&r)[4], const bf16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
// d (16 × 8 float) += a (16 × 16 bf16, row) · b (16 × 8 bf16, col).
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t PackPair(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Asynchronous copies (cp.async, sm_80+): the next tile travels while this
// one is computed on. `bytes` < 16 (0 for a row past T) fills the rest with
// zeros and reads nothing beyond `bytes`.
__device__ __forceinline__ void CopyAsync16(void* shared_destination, const void* global_source,
                                            int bytes) {
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(shared_destination)),
      "l"(global_source), "r"(bytes));
}
__device__ __forceinline__ void CopyAsync4(void* shared_destination, const void* global_source,
                                           int bytes) {
  asm volatile(
      "cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SharedAddress(shared_destination)),
      "l"(global_source), "r"(bytes));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// LoadTile, asynchronously (bf16 tiles only).
__device__ __forceinline__ void LoadTileAsync(bf16* tile, const bf16* source, int64_t row_stride,
                                              int valid_rows) {
  constexpr int kChunksPerRow = kHead / 8;
  for (int i = threadIdx.x; i < kTile * kChunksPerRow; i += kThreads) {
    const int row = i / kChunksPerRow, column = (i % kChunksPerRow) * 8;
    const bool valid = row < valid_rows;
    CopyAsync16(tile + row * kLd<bf16> + column, source + (valid ? row : 0) * row_stride + column,
                valid ? 16 : 0);
  }
}

constexpr size_t kMmaForwardShared = 5 * TileElements<bf16>() * sizeof(bf16);  // Q, 2 × (K, V)

__global__ void __launch_bounds__(kThreads)
    MmaForwardKernel(bf16* out, float* logsumexp, const bf16* qkv, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared);
  // K and V of key tile i in buffer i % 2.
  // (pointers computed, not indexed: an indexed array would live on the stack)
  const auto k_tiles = [&](int buffer) { return q_tile + (1 + 2 * buffer) * TileElements<bf16>(); };
  const auto v_tiles = [&](int buffer) { return q_tile + (2 + 2 * buffer) * TileElements<bf16>(); };
  constexpr int kLdb = kLd<bf16>;

  const int tiles = (T + kTile - 1) / kTile;
  const int query_tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const bf16* base = qkv + static_cast<int64_t>(b) * T * stride + h * kHead;
  const int q0 = query_tile * kTile;
  const auto load_keys = [&](int key_tile) {
    const int k0 = key_tile * kTile;
    LoadTileAsync(k_tiles(key_tile % 2), base + C + k0 * stride, stride, T - k0);
    LoadTileAsync(v_tiles(key_tile % 2), base + 2 * C + k0 * stride, stride, T - k0);
    CommitCopies();
  };
  LoadTileAsync(q_tile, base + q0 * stride, stride, T - q0);
  load_keys(0);  // one group with Q
  WaitCopies<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, pair = 2 * (lane % 4);
  const int warp_row0 = warp * kWarpRows;
  // The row and column that this lane's ldmatrix address names.
  const int matrix = lane / 8, matrix_row = lane % 8;
  // Q's A fragments, one per 16 head features: matrices (rows 0-7 | 8-15) ×
  // (features 0-7 | 8-15) in the order a0a1, a2a3, a4a5, a6a7.
  uint32_t q_fragments[kHead / 16][4];
#pragma unroll
  for (int kk = 0; kk < kHead / 16; ++kk) {
    LoadMatrices(q_fragments[kk], q_tile + (warp_row0 + (matrix % 2) * 8 + matrix_row) * kLdb +
                                      kk * 16 + (matrix / 2) * 8);
  }
  const int query[2] = {q0 + warp_row0 + g, q0 + warp_row0 + g + 8};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // sums: this lane's part
  float o[kHead / 8][4];
#pragma unroll
  for (int dn = 0; dn < kHead / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  }

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    // Tile key_tile + 1 travels while this one is computed on: its buffer
    // was last read in iteration key_tile − 1, which every warp has left.
    if (key_tile + 1 <= query_tile) {
      load_keys(key_tile + 1);
      WaitCopies<1>();
    } else {
      WaitCopies<0>();
    }
    __syncthreads();
    const bf16* k_tile = k_tiles(key_tile % 2);
    const bf16* v_tile = v_tiles(key_tile % 2);
    // S = Q·Kᵀ: 8 tiles of 8 keys. K's rows are B's columns: matrices (keys
    // 8j.. | 8j+8..) × (features 16kk.. | 16kk+8..) give b0b1 of tiles j and
    // j + 1.
    float s[kTile / 8][4];
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kTile / 8; j += 2) {
#pragma unroll
      for (int kk = 0; kk < kHead / 16; ++kk) {
        uint32_t k_fragments[4];
        LoadMatrices(k_fragments, k_tile + (8 * j + (matrix / 2) * 8 + matrix_row) * kLdb +
                                      kk * 16 + (matrix % 2) * 8);
        Mma(s[j], q_fragments[kk], k_fragments[0], k_fragments[1]);
        Mma(s[j + 1], q_fragments[kk], k_fragments[2], k_fragments[3]);
      }
    }
    // Mask, scale to log2 units, and the online softmax per row.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * j + pair + (e % 2);
        const int r = e / 2;
        s[j][e] = key <= query[r] ? s[j][e] * kScaleLog2 : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], s[j][e]);
      }
    }
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);  // finite: key k0 <= query
      rescale[r] = exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= rescale[r];
    }
#pragma unroll
    for (int dn = 0; dn < kHead / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[dn][e] *= rescale[e / 2];
    }
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - row_max[e / 2]);
        row_sum[e / 2] += s[j][e];
      }
    }
    // O += P·V over 4 steps of 16 keys. P's A fragment of step kk is key
    // tiles 2kk and 2kk + 1 as they are; V's B fragments come transposed:
    // matrices (keys 16kk.. | 16kk+8..) × (features 8dn.. | 8dn+8..) give
    // b0b1 and b2b3 of feature tiles dn and dn + 1.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      const uint32_t p_fragment[4] = {PackPair(s[2 * kk][0], s[2 * kk][1]),
                                      PackPair(s[2 * kk][2], s[2 * kk][3]),
                                      PackPair(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                      PackPair(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < kHead / 8; dn += 2) {
        uint32_t v_fragments[4];
        LoadMatricesTransposed(
            v_fragments,
            v_tile + (16 * kk + (matrix % 2) * 8 + matrix_row) * kLdb + 8 * dn + (matrix / 2) * 8);
        Mma(o[dn], p_fragment, v_fragments[0], v_fragments[1]);
        Mma(o[dn + 1], p_fragment, v_fragments[2], v_fragments[3]);
      }
    }
    __syncthreads();  // this buffer is refilled next iteration
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    if (query[r] >= T) continue;
    const float inverse = 1.0f / row_sum[r];
    bf16* out_row = out + (static_cast<int64_t>(b) * T + query[r]) * C + h * kHead;
#pragma unroll
    for (int dn = 0; dn < kHead / 8; ++dn) {
      StorePair(out_row + 8 * dn + pair, o[dn][2 * r] * inverse, o[dn][2 * r + 1] * inverse);
    }
    if (lane % 4 == 0) {
      logsumexp[static_cast<int64_t>(bh) * T + query[r]] = row_max[r] + log2f(row_sum[r]);
    }
  }
}

// A warp's A fragments of 16 rows × 64 features (rows `rows` of a padded
// tile), one per 16 features.
__device__ __forceinline__ void LoadRowFragments(uint32_t (&fragments)[kHead / 16][4],
                                                 const bf16* rows) {
  const int lane = threadIdx.x % 32, matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
  for (int kk = 0; kk < kHead / 16; ++kk) {
    LoadMatrices(fragments[kk],
                 rows + ((matrix % 2) * 8 + matrix_row) * kLd<bf16> + kk * 16 + (matrix / 2) * 8);
  }
}

// scores[j] (16 × 8, tile j of 8 columns) = A · Bᵀ over 64 features, A the
// warp's fragments, B's 64 rows those of `tile` (the forward's S = Q·Kᵀ).
__device__ __forceinline__ void MmaRowsTimesTransposed(float (&scores)[kTile / 8][4],
                                                       const uint32_t (&a)[kHead / 16][4],
                                                       const bf16* tile) {
  const int lane = threadIdx.x % 32, matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
  for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) scores[j][e] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kTile / 8; j += 2) {
#pragma unroll
    for (int kk = 0; kk < kHead / 16; ++kk) {
      uint32_t b[4];
      LoadMatrices(b, tile + (8 * j + (matrix / 2) * 8 + matrix_row) * kLd<bf16> + kk * 16 +
                          (matrix % 2) * 8);
      Mma(scores[j], a[kk], b[0], b[1]);
      Mma(scores[j + 1], a[kk], b[2], b[3]);
    }
  }
}

// out[dn] (16 × 8, features 8dn..) += P · tile, P the warp's 16 × 64 values
// in score layout (columns = the tile's 64 rows), rounded to bf16.
__device__ __forceinline__ void MmaScoresTimesRows(float (&out)[kHead / 8][4],
                                                   const float (&p)[kTile / 8][4],
                                                   const bf16* tile) {
  const int lane = threadIdx.x % 32, matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    const uint32_t a[4] = {
        PackPair(p[2 * kk][0], p[2 * kk][1]), PackPair(p[2 * kk][2], p[2 * kk][3]),
        PackPair(p[2 * kk + 1][0], p[2 * kk + 1][1]), PackPair(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < kHead / 8; dn += 2) {
      uint32_t b[4];
      LoadMatricesTransposed(b, tile + (16 * kk + (matrix % 2) * 8 + matrix_row) * kLd<bf16> +
                                    8 * dn + (matrix / 2) * 8);
      Mma(out[dn], a, b[0], b[1]);
      Mma(out[dn + 1], a, b[2], b[3]);
    }
  }
}

// Writes 16 rows × 64 of `values` (output layout), times `scale`, from
// `row0` on (rows `row_stride` apart; those from T on are skipped).
__device__ __forceinline__ void StoreFragmentRows(bf16* destination, int64_t row_stride, int row0,
                                                  int T, const float (&values)[kHead / 8][4],
                                                  float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, pair = 2 * (lane % 4);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r;
    if (row >= T) continue;
#pragma unroll
    for (int dn = 0; dn < kHead / 8; ++dn) {
      StorePair(destination + row * row_stride + 8 * dn + pair, values[dn][2 * r] * scale,
                values[dn][2 * r + 1] * scale);
    }
  }
}

// K, V, 2 × (Q, dO, log-sum-exps, dots).
constexpr size_t kMmaKeyValueShared =
    6 * TileElements<bf16>() * sizeof(bf16) + 4 * kTile * sizeof(float);
// Q, dO, 2 × (K, V).
constexpr size_t kMmaQueryShared = 6 * TileElements<bf16>() * sizeof(bf16);

// KeyValueGradientKernel on mma.sync: the warp's rows are 16 keys; Sᵀ, Pᵀ,
// dPᵀ and dSᵀ stay in registers and are the A operands of dV += Pᵀ·dO and
// dK += dSᵀ·Q.
__global__ void __launch_bounds__(kThreads)
    MmaKeyValueGradientKernel(bf16* d_qkv, const bf16* d_out, const bf16* qkv,
                              const float* logsumexp, const float* dots, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* k_tile = reinterpret_cast<bf16*>(shared);
  bf16* v_tile = k_tile + TileElements<bf16>();
  // Query tile i's Q, dO, log-sum-exps and dots in buffer i % 2.
  // (pointers computed, not indexed: an indexed array would live on the stack)
  const auto q_tiles = [&](int buffer) { return k_tile + (2 + 2 * buffer) * TileElements<bf16>(); };
  const auto do_tiles = [&](int buffer) {
    return k_tile + (3 + 2 * buffer) * TileElements<bf16>();
  };
  float* const rows = reinterpret_cast<float*>(k_tile + 6 * TileElements<bf16>());
  const auto lse_rows = [&](int buffer) { return rows + buffer * kTile; };
  const auto dot_rows = [&](int buffer) { return rows + (2 + buffer) * kTile; };

  const int tiles = (T + kTile - 1) / kTile;
  const int key_tile = static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t batch_offset = static_cast<int64_t>(b) * T * stride + h * kHead;
  const bf16* base = qkv + batch_offset;
  const bf16* d_out_base = d_out + static_cast<int64_t>(b) * T * C + h * kHead;
  const int k0 = key_tile * kTile;
  const float* row_lse = logsumexp + static_cast<int64_t>(bh) * T;
  const float* row_dots = dots + static_cast<int64_t>(bh) * T;
  const auto load_queries = [&](int query_tile) {
    const int q0 = query_tile * kTile, buffer = query_tile % 2;
    LoadTileAsync(q_tiles(buffer), base + q0 * stride, stride, T - q0);
    LoadTileAsync(do_tiles(buffer), d_out_base + q0 * static_cast<int64_t>(C), C, T - q0);
    // 64 log-sum-exps, then 64 dots: one float per thread (0 past T).
    const int column = static_cast<int>(threadIdx.x) % kTile, query = q0 + column;
    const bool valid = query < T;
    if (threadIdx.x < kTile) {
      CopyAsync4(lse_rows(buffer) + column, row_lse + (valid ? query : 0), valid ? 4 : 0);
    } else {
      CopyAsync4(dot_rows(buffer) + column, row_dots + (valid ? query : 0), valid ? 4 : 0);
    }
    CommitCopies();
  };
  LoadTileAsync(k_tile, base + C + k0 * stride, stride, T - k0);
  LoadTileAsync(v_tile, base + 2 * C + k0 * stride, stride, T - k0);
  load_queries(key_tile);  // one group with K and V
  WaitCopies<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, pair = 2 * (lane % 4);
  const int warp_row0 = warp * kWarpRows;
  uint32_t k_fragments[kHead / 16][4], v_fragments[kHead / 16][4];
  LoadRowFragments(k_fragments, k_tile + warp_row0 * kLd<bf16>);
  LoadRowFragments(v_fragments, v_tile + warp_row0 * kLd<bf16>);
  const int key[2] = {k0 + warp_row0 + g, k0 + warp_row0 + g + 8};
  float d_k[kHead / 8][4], d_v[kHead / 8][4];
#pragma unroll
  for (int dn = 0; dn < kHead / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) d_k[dn][e] = d_v[dn][e] = 0.0f;
  }

  for (int query_tile = key_tile; query_tile < tiles; ++query_tile) {
    const int q0 = query_tile * kTile;
    if (query_tile + 1 < tiles) {
      load_queries(query_tile + 1);
      WaitCopies<1>();
    } else {
      WaitCopies<0>();
    }
    __syncthreads();
    const bf16* q_tile = q_tiles(query_tile % 2);
    const bf16* do_tile = do_tiles(query_tile % 2);
    const float* lse_row = lse_rows(query_tile % 2);
    const float* dot_row = dot_rows(query_tile % 2);
    float p[kTile / 8][4], ds[kTile / 8][4];
    MmaRowsTimesTransposed(p, k_fragments, q_tile);    // Sᵀ
    MmaRowsTimesTransposed(ds, v_fragments, do_tile);  // dPᵀ
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int column = 8 * j + pair + (e % 2), query = q0 + column;
        p[j][e] =
            query >= key[e / 2] && query < T ? exp2f(p[j][e] * kScaleLog2 - lse_row[column]) : 0.0f;
        ds[j][e] = p[j][e] * (ds[j][e] - dot_row[column]);
      }
    }
    MmaScoresTimesRows(d_v, p, do_tile);
    MmaScoresTimesRows(d_k, ds, q_tile);
    __syncthreads();  // this buffer is refilled next iteration
  }
  bf16* d_base = d_qkv + batch_offset;
  StoreFragmentRows(d_base + C, stride, k0 + warp_row0, T, d_k, kScale);
  StoreFragmentRows(d_base + 2 * C, stride, k0 + warp_row0, T, d_v, 1.0f);
}

// QueryGradientKernel on mma.sync: the warp's rows are 16 queries; S, P, dP
// and dS stay in registers, dS the A operand of dQ += dS·K.
__global__ void __launch_bounds__(kThreads)
    MmaQueryGradientKernel(bf16* d_qkv, const bf16* d_out, const bf16* qkv, const float* logsumexp,
                           const float* dots, int T, int NH) {
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared);
  bf16* do_tile = q_tile + TileElements<bf16>();
  // K and V of key tile i in buffer i % 2.
  // (pointers computed, not indexed: an indexed array would live on the stack)
  const auto k_tiles = [&](int buffer) { return q_tile + (2 + 2 * buffer) * TileElements<bf16>(); };
  const auto v_tiles = [&](int buffer) { return q_tile + (3 + 2 * buffer) * TileElements<bf16>(); };

  const int tiles = (T + kTile - 1) / kTile;
  const int query_tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest first
  const int bh = static_cast<int>(blockIdx.y), b = bh / NH, h = bh % NH;
  const int C = NH * kHead;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t batch_offset = static_cast<int64_t>(b) * T * stride + h * kHead;
  const bf16* base = qkv + batch_offset;
  const int q0 = query_tile * kTile;
  const auto load_keys = [&](int key_tile) {
    const int k0 = key_tile * kTile;
    LoadTileAsync(k_tiles(key_tile % 2), base + C + k0 * stride, stride, T - k0);
    LoadTileAsync(v_tiles(key_tile % 2), base + 2 * C + k0 * stride, stride, T - k0);
    CommitCopies();
  };
  LoadTileAsync(q_tile, base + q0 * stride, stride, T - q0);
  LoadTileAsync(do_tile, d_out + (static_cast<int64_t>(b) * T + q0) * C + h * kHead, C, T - q0);
  load_keys(0);  // one group with Q and dO
  WaitCopies<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, pair = 2 * (lane % 4);
  const int warp_row0 = warp * kWarpRows;
  uint32_t q_fragments[kHead / 16][4], do_fragments[kHead / 16][4];
  LoadRowFragments(q_fragments, q_tile + warp_row0 * kLd<bf16>);
  LoadRowFragments(do_fragments, do_tile + warp_row0 * kLd<bf16>);
  int query[2];
  float lse[2], dot[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    query[r] = q0 + warp_row0 + g + 8 * r;
    // A row past T gets no probabilities, so nothing there can overflow.
    lse[r] = query[r] < T ? logsumexp[static_cast<int64_t>(bh) * T + query[r]] : 0.0f;
    dot[r] = query[r] < T ? dots[static_cast<int64_t>(bh) * T + query[r]] : 0.0f;
  }
  float d_q[kHead / 8][4];
#pragma unroll
  for (int dn = 0; dn < kHead / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) d_q[dn][e] = 0.0f;
  }

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    if (key_tile + 1 <= query_tile) {
      load_keys(key_tile + 1);
      WaitCopies<1>();
    } else {
      WaitCopies<0>();
    }
    __syncthreads();
    const bf16* k_tile = k_tiles(key_tile % 2);
    const bf16* v_tile = v_tiles(key_tile % 2);
    float p[kTile / 8][4], ds[kTile / 8][4];
    MmaRowsTimesTransposed(p, q_fragments, k_tile);    // S
    MmaRowsTimesTransposed(ds, do_fragments, v_tile);  // dP
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, key = k0 + 8 * j + pair + (e % 2);
        const float probability =
            query[r] < T && key <= query[r] ? exp2f(p[j][e] * kScaleLog2 - lse[r]) : 0.0f;
        ds[j][e] = probability * (ds[j][e] - dot[r]);
      }
    }
    MmaScoresTimesRows(d_q, ds, k_tile);
    __syncthreads();  // this buffer is refilled next iteration
  }
  StoreFragmentRows(d_qkv + batch_offset, stride, q0 + warp_row0, T, d_q, kScale);
}

}  // namespace

void FusedAttentionForward(__nv_bfloat16* out, float* logsumexp, const __nv_bfloat16* qkv,
                           int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                           cudaStream_t stream) {
  AllowShared(MmaForwardKernel, kMmaForwardShared);
  MmaForwardKernel<<<TileGrid(batch_size, sequence_length, num_heads), kThreads, kMmaForwardShared,
                     stream>>>(out, logsumexp, qkv, static_cast<int>(sequence_length),
                               static_cast<int>(num_heads));
}
void FusedAttentionBackward(__nv_bfloat16* d_qkv, float* scratch, const __nv_bfloat16* d_out,
                            const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                            const float* logsumexp, int64_t batch_size, int64_t sequence_length,
                            int64_t num_heads, cudaStream_t stream) {
  const int T = static_cast<int>(sequence_length), NH = static_cast<int>(num_heads);
  RowDots(scratch, d_out, out, batch_size * sequence_length * num_heads, T, NH, stream);
  const dim3 grid = TileGrid(batch_size, sequence_length, num_heads);
  AllowShared(MmaKeyValueGradientKernel, kMmaKeyValueShared);
  MmaKeyValueGradientKernel<<<grid, kThreads, kMmaKeyValueShared, stream>>>(
      d_qkv, d_out, qkv, logsumexp, scratch, T, NH);
  AllowShared(MmaQueryGradientKernel, kMmaQueryShared);
  MmaQueryGradientKernel<<<grid, kThreads, kMmaQueryShared, stream>>>(d_qkv, d_out, qkv, logsumexp,
                                                                      scratch, T, NH);
}
}  // namespace infini::examples::gpt2::gpu
