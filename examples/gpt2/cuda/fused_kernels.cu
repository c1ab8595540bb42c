// The fused passes of kernels.h: each replaces two or more of the unfused
// kernels beside it, which stay as the reference of gpt2_kernels_gpu_test.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "device_math.cuh"
#include "kernels.h"

namespace infini::examples::gpt2::gpu {
namespace {

using namespace detail;

// 16 bytes of T: one vector load or store.
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));
template <typename T>
struct alignas(16) Pack {
  T values[kPack<T>];
};
// One T in Pack's shape, for kernels written over chunks of either.
template <typename T>
struct Single {
  T values[1];
};

// (max, sum) of exponentials relative to max, merged: the online softmax's
// step. An empty side has max −∞ and sum 0.
struct SoftmaxState {
  float max = -INFINITY, sum = 0.0f;
};
__device__ __forceinline__ SoftmaxState Merge(SoftmaxState a, SoftmaxState b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return a;
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

// One block per row: one pass over the logits for the log-sum-exp.
template <typename T>
__global__ void CrossEntropyForwardKernel(float* losses, float* logsumexp, const T* logits,
                                          const int32_t* targets, int64_t V, int64_t Vp) {
  __shared__ float shared_max[kThreads / 32], shared_sum[kThreads / 32];
  constexpr int P = kPack<T>;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  SoftmaxState state;
  // Vp is a multiple of P (128 rows of padding): whole packs stay in the row.
  for (int64_t v0 = threadIdx.x * static_cast<int64_t>(P); v0 < V;
       v0 += static_cast<int64_t>(blockDim.x) * P) {
    const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(x + v0);
    float values[P];
    float chunk_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      values[j] = v0 + j < V ? ToFloat(pack.values[j]) : -INFINITY;
      chunk_max = fmaxf(chunk_max, values[j]);
    }
    const float max = fmaxf(state.max, chunk_max);  // finite: v0 < V
    float sum = state.sum * expf(state.max - max);
#pragma unroll
    for (int j = 0; j < P; ++j) sum += expf(values[j] - max);
    state = {max, sum};
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const SoftmaxState other{__shfl_xor_sync(0xffffffffu, state.max, offset),
                             __shfl_xor_sync(0xffffffffu, state.sum, offset)};
    state = Merge(state, other);
  }
  if (threadIdx.x % 32 == 0) {
    shared_max[threadIdx.x / 32] = state.max;
    shared_sum[threadIdx.x / 32] = state.sum;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    state = Merge(state, {shared_max[w], shared_sum[w]});
  }
  const float lse = state.max + logf(state.sum);
  logsumexp[row] = lse;
  const int32_t target = targets[row];
  losses[row] = target >= 0 ? lse - ToFloat(x[target]) : 0.0f;
}

// One thread per pack of logits, in place.
template <typename T>
__global__ void CrossEntropyBackwardKernel(T* logits, const float* logsumexp,
                                           const int32_t* targets, int64_t rows, int64_t V,
                                           int64_t Vp, float scale) {
  constexpr int P = kPack<T>;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * P;
  if (first >= rows * Vp) return;
  const int64_t row = first / Vp, v0 = first % Vp;
  const int32_t target = targets[row];
  const float lse = logsumexp[row];
  Pack<T>* at = reinterpret_cast<Pack<T>*>(logits + first);
  Pack<T> pack = *at;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int64_t v = v0 + j;
    float gradient = 0.0f;
    if (target >= 0 && v < V) {
      gradient = scale * (expf(ToFloat(pack.values[j]) - lse) - (v == target ? 1.0f : 0.0f));
    }
    pack.values[j] = FromFloat<T>(gradient);
  }
  *at = pack;
}

// True when rows of `channels` T split into whole 16-byte packs.
template <typename T>
bool Packs(const void* pointer, int64_t channels) {
  return channels % kPack<T> == 0 && reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

// LayerNormForwardKernel's arithmetic, a warp per row, a pack per lane.
template <typename T>
__global__ void VectorizedLayerNormForwardKernel(T* out, float* mean_out, float* rstd_out,
                                                 const T* in, const T* weight, const T* bias,
                                                 int64_t rows, int64_t C) {
  constexpr int P = kPack<T>;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* x = in + row * C;
  float sum = 0.0f;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(x + c);
#pragma unroll
    for (int j = 0; j < P; ++j) sum += ToFloat(pack.values[j]);
  }
  const float mean = WarpSum(sum) / static_cast<float>(C);
  float squares = 0.0f;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(x + c);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float d = ToFloat(pack.values[j]) - mean;
      squares += d * d;
    }
  }
  const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(C) + kLayerNormEpsilon);
  T* y = out + row * C;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(x + c);
    const Pack<T> w = *reinterpret_cast<const Pack<T>*>(weight + c);
    const Pack<T> b = *reinterpret_cast<const Pack<T>*>(bias + c);
    Pack<T> result;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      result.values[j] = FromFloat<T>(
          (ToFloat(pack.values[j]) - mean) * rstd * ToFloat(w.values[j]) + ToFloat(b.values[j]));
    }
    *reinterpret_cast<Pack<T>*>(y + c) = result;
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// A warp per row (LayerNormInputGradientKernel's arithmetic), rows strided
// over the grid; the block's parameter sums in shared memory: weight sums
// in sums[0, C), bias sums in sums[C, 2C).
// With kPacked a lane takes P adjacent channels at a time (16-byte loads).
template <typename T, bool kPacked>
__global__ void FusedLayerNormBackwardKernel(T* d_in, float* d_weight, float* d_bias,
                                             const T* d_out, const T* in, const T* weight,
                                             const float* mean, const float* rstd, int64_t rows,
                                             int64_t C) {
  constexpr int P = kPacked ? kPack<T> : 1;
  using Chunk = std::conditional_t<kPacked, Pack<T>, Single<T>>;
  extern __shared__ float sums[];
  for (int64_t i = threadIdx.x; i < 2 * C; i += blockDim.x) sums[i] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % 32, warps = static_cast<int>(blockDim.x / 32);
  for (int64_t row = blockIdx.x * static_cast<int64_t>(warps) + threadIdx.x / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * warps) {
    const T* dy = d_out + row * C;
    const T* x = in + row * C;
    const float m = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_gn = 0.0f;
    for (int64_t c = lane * P; c < C; c += 32 * P) {
      const Chunk x_c = *reinterpret_cast<const Chunk*>(x + c);
      const Chunk dy_c = *reinterpret_cast<const Chunk*>(dy + c);
      const Chunk w_c = *reinterpret_cast<const Chunk*>(weight + c);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float n = (ToFloat(x_c.values[j]) - m) * r;
        const float g = ToFloat(dy_c.values[j]) * ToFloat(w_c.values[j]);
        sum_g += g;
        sum_gn += g * n;
      }
    }
    const float mean_g = WarpSum(sum_g) / static_cast<float>(C);
    const float mean_gn = WarpSum(sum_gn) / static_cast<float>(C);
    T* dx = d_in + row * C;
    for (int64_t c = lane * P; c < C; c += 32 * P) {
      const Chunk x_c = *reinterpret_cast<const Chunk*>(x + c);
      const Chunk dy_c = *reinterpret_cast<const Chunk*>(dy + c);
      const Chunk w_c = *reinterpret_cast<const Chunk*>(weight + c);
      Chunk dx_c = *reinterpret_cast<const Chunk*>(dx + c);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float n = (ToFloat(x_c.values[j]) - m) * r;
        const float dy_j = ToFloat(dy_c.values[j]);
        const float g = dy_j * ToFloat(w_c.values[j]);
        dx_c.values[j] = FromFloat<T>(ToFloat(dx_c.values[j]) + r * (g - mean_g - n * mean_gn));
        atomicAdd(sums + c + j, dy_j * n);
        atomicAdd(sums + C + c + j, dy_j);
      }
      *reinterpret_cast<Chunk*>(dx + c) = dx_c;
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    atomicAdd(d_weight + c, sums[c]);
    atomicAdd(d_bias + c, sums[C + c]);
  }
}

// Block (x: a slab of 32 · P columns, y: a chunk of rows); warp w of the
// block sums rows w, w + 8, … of the chunk over its lane's P columns.
template <typename T>
__global__ void VectorizedBiasBackwardKernel(float* d_bias, const T* d_out, int64_t rows, int64_t C,
                                             int64_t rows_per_chunk) {
  constexpr int P = kPack<T>;
  constexpr int kWarpsPerBlock = kThreads / 32;
  __shared__ float sums[kWarpsPerBlock][32 * P];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t column0 = blockIdx.x * static_cast<int64_t>(32 * P) + lane * P;
  const int64_t first_row = blockIdx.y * rows_per_chunk;
  const int64_t end_row = first_row + rows_per_chunk < rows ? first_row + rows_per_chunk : rows;
  float sum[P] = {};
  if (column0 < C) {
    for (int64_t row = first_row + warp; row < end_row; row += kWarpsPerBlock) {
      const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(d_out + row * C + column0);
#pragma unroll
      for (int j = 0; j < P; ++j) sum[j] += ToFloat(pack.values[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < P; ++j) sums[warp][lane * P + j] = sum[j];
  __syncthreads();
  for (int i = threadIdx.x; i < 32 * P; i += blockDim.x) {
    const int64_t column = blockIdx.x * static_cast<int64_t>(32 * P) + i;
    if (column >= C) continue;
    float total = 0.0f;
    for (int w = 0; w < kWarpsPerBlock; ++w) total += sums[w][i];
    atomicAdd(d_bias + column, total);
  }
}

__global__ void ChunkedSumOfSquaresKernel(float* sum_of_squares, const ParameterChunk* chunks,
                                          const float* const* group_gradients) {
  __shared__ float shared[kThreads / 32];
  const ParameterChunk chunk = chunks[blockIdx.x];
  const float* gradients = group_gradients[chunk.group] + (chunk.offset - chunk.group_offset);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < chunk.count; i += blockDim.x) sum += gradients[i] * gradients[i];
  sum = BlockReduce<false>(sum, shared);
  if (threadIdx.x == 0) atomicAdd(sum_of_squares, sum);
}

// AdamWKernel's update (kernels.cu), one block per chunk.
template <typename T>
__global__ void ChunkedAdamWKernel(float* master, T* parameters, float* m_state, float* v_state,
                                   const ParameterChunk* chunks,
                                   const float* const* group_gradients, AdamWStep step,
                                   const float* sum_of_squares) {
  const ParameterChunk chunk = chunks[blockIdx.x];
  const float* gradients = group_gradients[chunk.group] + (chunk.offset - chunk.group_offset);
  const float scale = AdamWGradientScale(step, sum_of_squares);
  for (int local = threadIdx.x; local < chunk.count; local += blockDim.x) {
    const int64_t i = chunk.offset + local;
    const float updated =
        AdamWWeight(i, gradients[local] * scale, master, m_state, v_state, chunk.decays, step);
    if (parameters != nullptr) parameters[i] = FromFloat<T>(updated);
  }
}

}  // namespace

template <typename T>
void VectorizedLayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                                const T* bias, int64_t rows, int64_t channels,
                                cudaStream_t stream) {
  if (!Packs<T>(out, channels) || !Packs<T>(in, channels) || !Packs<T>(weight, channels) ||
      !Packs<T>(bias, channels)) {
    LayerNormForward(out, mean, rstd, in, weight, bias, rows, channels, stream);
    return;
  }
  constexpr int kRowsPerBlock = kThreads / 32;
  VectorizedLayerNormForwardKernel<<<Blocks(rows, kRowsPerBlock), kThreads, 0, stream>>>(
      out, mean, rstd, in, weight, bias, rows, channels);
}

template <typename T>
void FusedLayerNormBackward(T* d_in, float* d_weight, float* d_bias, const T* d_out, const T* in,
                            const T* weight, const float* mean, const float* rstd, int64_t rows,
                            int64_t channels, cudaStream_t stream) {
  const size_t shared_bytes = 2 * static_cast<size_t>(channels) * sizeof(float);
  if (shared_bytes > 48 * 1024) {
    LayerNormBackward(d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, rows, channels,
                      stream);
    return;
  }
  // Enough blocks to fill the GPU a few times over; each then adds its sums
  // once (rows / blocks rows each).
  constexpr int64_t kBlocks = 512;
  const int64_t warps_per_block = kThreads / 32;
  const int64_t wanted = (rows + warps_per_block - 1) / warps_per_block;
  const unsigned blocks = static_cast<unsigned>(wanted < kBlocks ? wanted : kBlocks);
  const bool packed = Packs<T>(d_in, channels) && Packs<T>(d_out, channels) &&
                      Packs<T>(in, channels) && Packs<T>(weight, channels);
  if (packed) {
    FusedLayerNormBackwardKernel<T, true><<<blocks, kThreads, shared_bytes, stream>>>(
        d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, rows, channels);
  } else {
    FusedLayerNormBackwardKernel<T, false><<<blocks, kThreads, shared_bytes, stream>>>(
        d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, rows, channels);
  }
}

template <typename T>
void VectorizedBiasBackward(float* d_bias, const T* d_out, int64_t rows, int64_t channels,
                            cudaStream_t stream) {
  constexpr int P = kPack<T>;
  if (channels % P != 0 || reinterpret_cast<uintptr_t>(d_out) % 16 != 0) {
    BiasBackward(d_bias, d_out, rows, channels, stream);
    return;
  }
  // Chunks of 128 rows (16 per warp): d12's 8192 rows give 64 chunks per slab.
  constexpr int64_t kRowsPerChunk = 128;
  const dim3 grid(static_cast<unsigned>((channels + 32 * P - 1) / (32 * P)),
                  static_cast<unsigned>((rows + kRowsPerChunk - 1) / kRowsPerChunk));
  VectorizedBiasBackwardKernel<<<grid, kThreads, 0, stream>>>(d_bias, d_out, rows, channels,
                                                              kRowsPerChunk);
}

void ChunkedSumOfSquares(float* sum_of_squares, const ParameterChunk* chunks, int64_t num_chunks,
                         const float* const* group_gradients, cudaStream_t stream) {
  if (num_chunks == 0) return;
  ChunkedSumOfSquaresKernel<<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(
      sum_of_squares, chunks, group_gradients);
}

template <typename T>
void ChunkedAdamWUpdate(float* master, T* parameters, float* first_moment, float* second_moment,
                        const ParameterChunk* chunks, int64_t num_chunks,
                        const float* const* group_gradients, const AdamWStep& step,
                        const float* sum_of_squares, cudaStream_t stream) {
  if (num_chunks == 0) return;
  ChunkedAdamWKernel<<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(
      master, parameters, first_moment, second_moment, chunks, group_gradients, step,
      sum_of_squares);
}

template <typename T>
void CrossEntropyForward(float* losses, float* logsumexp, const T* logits, const int32_t* targets,
                         int64_t rows, int64_t vocab, int64_t padded_vocab, cudaStream_t stream) {
  CrossEntropyForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      losses, logsumexp, logits, targets, vocab, padded_vocab);
}

template <typename T>
void CrossEntropyBackward(T* logits, const float* logsumexp, const int32_t* targets, int64_t rows,
                          int64_t vocab, int64_t padded_vocab, float scale, cudaStream_t stream) {
  CrossEntropyBackwardKernel<<<Blocks(rows * padded_vocab / kPack<T>), kThreads, 0, stream>>>(
      logits, logsumexp, targets, rows, vocab, padded_vocab, scale);
}

#define INFINI_GPT2_INSTANTIATE_FUSED(T)                                                           \
  template void CrossEntropyForward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, \
                                       int64_t, cudaStream_t);                                     \
  template void CrossEntropyBackward<T>(T*, const float*, const int32_t*, int64_t, int64_t,        \
                                        int64_t, float, cudaStream_t);                             \
  template void VectorizedLayerNormForward<T>(T*, float*, float*, const T*, const T*, const T*,    \
                                              int64_t, int64_t, cudaStream_t);                     \
  template void VectorizedBiasBackward<T>(float*, const T*, int64_t, int64_t, cudaStream_t);       \
  template void FusedLayerNormBackward<T>(T*, float*, float*, const T*, const T*, const T*,        \
                                          const float*, const float*, int64_t, int64_t,            \
                                          cudaStream_t);                                           \
  template void ChunkedAdamWUpdate<T>(float*, T*, float*, float*, const ParameterChunk*, int64_t,  \
                                      const float* const*, const AdamWStep&, const float*,         \
                                      cudaStream_t);

INFINI_GPT2_INSTANTIATE_FUSED(float)
INFINI_GPT2_INSTANTIATE_FUSED(__nv_bfloat16)

}  // namespace infini::examples::gpt2::gpu
