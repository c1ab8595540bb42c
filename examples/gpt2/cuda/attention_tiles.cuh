// What the fused attention kernels share (attention.cu: wmma and float32;
// attention_mma.cu: bf16 on mma.sync): the tile geometry, conversions, the
// tile loader, the per-row Σ d_out·out of the backward and the launch
// helpers.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention.h"

namespace infini::examples::gpt2::gpu::attention_detail {

using bf16 = __nv_bfloat16;

constexpr int kHead = static_cast<int>(kFusedAttentionHeadSize);
constexpr int kTile = 64;  // query rows and keys per tile
constexpr int kWarps = 4;  // 16 rows each
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kTile / kWarps;
constexpr int kFloatLd = kTile + 4;           // float tile row, padded against bank conflicts
constexpr int kFloatTile = kTile * kFloatLd;  // elements
static_assert(kHead == kTile, "the tiles are square: 64 keys and 64 head features");

// Tiles of E (Q, K, V, dO, P, dS): rows padded against bank conflicts, by 8
// bf16 or 4 floats (16 bytes; a float row of 68 puts the rows 4 banks apart).
template <typename E>
constexpr int kLd = kHead + 16 / static_cast<int>(sizeof(E));
template <typename E>
__host__ __device__ constexpr int TileElements() {
  return kTile * kLd<E>;
}
// 1 where P and dS need tiles of their own (bf16, for the tensor cores); in
// float they overwrite the float scores they come from, which have the same
// layout (kLd<float> == kFloatLd): 17 KiB less per tile, two blocks per SM.
template <typename E>
__host__ __device__ constexpr int OwnProbabilityTiles() {
  return std::is_same_v<E, float> ? 0 : 1;
}
static_assert(kLd<float> == kFloatLd);

// log2(e) / sqrt(64): scores in log2 units.
constexpr float kScaleLog2 = 1.4426950408889634f / 8.0f;
constexpr float kScale = 1.0f / 8.0f;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(bf16 x) { return __bfloat162float(x); }
template <typename E>
__device__ __forceinline__ E FromFloat(float x) {
  if constexpr (std::is_same_v<E, float>) {
    return x;
  } else {
    return __float2bfloat16(x);
  }
}
// Two adjacent elements of E from two floats.
__device__ __forceinline__ void StorePair(float* at, float a, float b) {
  *reinterpret_cast<float2*>(at) = make_float2(a, b);
}
__device__ __forceinline__ void StorePair(bf16* at, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(a, b);
}

// 64 rows of 64 E from `source` (rows `row_stride` apart) into a padded
// shared tile; rows from `valid_rows` on are zero.
template <typename E>
__device__ __forceinline__ void LoadTile(E* tile, const E* source, int64_t row_stride,
                                         int valid_rows) {
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(E));
  constexpr int kChunksPerRow = kHead / kPerChunk;
  for (int i = threadIdx.x; i < kTile * kChunksPerRow; i += kThreads) {
    const int row = i / kChunksPerRow, column = (i % kChunksPerRow) * kPerChunk;
    uint4 chunk = make_uint4(0, 0, 0, 0);
    if (row < valid_rows) {
      chunk = *reinterpret_cast<const uint4*>(source + row * row_stride + column);
    }
    *reinterpret_cast<uint4*>(tile + row * kLd<E> + column) = chunk;
  }
}

// scratch[(b·NH + h)·T + t] = Σ_d d_out·out over the head's 64 features: one
// warp per (b, t, h).
template <typename E>
__global__ void RowDotKernel(float* dots, const E* d_out, const E* out, int64_t rows, int T,
                             int NH) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int h = static_cast<int>(row % NH);
  const int64_t bt = row / NH;
  const int64_t offset = row * kHead + 2 * lane;
  float dot = ToFloat(d_out[offset]) * ToFloat(out[offset]) +
              ToFloat(d_out[offset + 1]) * ToFloat(out[offset + 1]);
  for (int step = 16; step > 0; step /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, step);
  if (lane == 0) {
    const int64_t b = bt / T, t = bt % T;
    dots[(b * NH + h) * T + t] = dot;
  }
}

// Above 48 KiB a kernel's dynamic shared memory must be asked for; once per
// process and device suffices, but asking again is cheap and keeps this
// free of state.
template <typename Kernel>
void AllowShared(Kernel kernel, size_t bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
}

inline dim3 TileGrid(int64_t batch_size, int64_t sequence_length, int64_t num_heads) {
  return dim3(static_cast<unsigned>((sequence_length + kTile - 1) / kTile),
              static_cast<unsigned>(batch_size * num_heads));
}

template <typename E>
void RowDots(float* dots, const E* d_out, const E* out, int64_t rows, int T, int NH,
             cudaStream_t stream) {
  constexpr int kRowsPerBlock = 8;
  RowDotKernel<E><<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                    kRowsPerBlock * 32, 0, stream>>>(dots, d_out, out, rows, T, NH);
}

}  // namespace infini::examples::gpt2::gpu::attention_detail
