// Device helpers shared by the gpt2 kernel files: conversions between the
// activation type and float, and warp and block reductions.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace infini::examples::gpt2::gpu::detail {

constexpr int kThreads = 256;

// The layernorm epsilon of the host model (model.cc kLayerNormEpsilon).
constexpr float kLayerNormEpsilon = 1e-5f;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

inline unsigned Blocks(int64_t count, int threads = kThreads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

__device__ __forceinline__ float WarpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}
__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Sum (or max) over a block of kThreads; every thread gets the result.
// `shared` holds kThreads / 32 floats; the call begins and ends with a
// barrier so `shared` can be reused at once.
template <bool kMax>
__device__ float BlockReduce(float value, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  value = kMax ? WarpMax(value) : WarpSum(value);
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  float result = shared[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    result = kMax ? fmaxf(result, shared[w]) : result + shared[w];
  }
  return result;
}

}  // namespace infini::examples::gpt2::gpu::detail
