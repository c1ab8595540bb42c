// Device helpers shared by the gpt2 kernel files: conversions between the
// activation type and float, warp and block reductions, and AdamW's update
// of one weight.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels.h"  // AdamWStep

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

// The factor every gradient is multiplied by: step.gradient_scale, and the
// clip to step.max_norm when the scaled global norm sqrt(*sum_of_squares)
// exceeds it.
__device__ __forceinline__ float AdamWGradientScale(const AdamWStep& step,
                                                    const float* sum_of_squares) {
  float scale = step.gradient_scale;
  if (step.max_norm > 0.0f) {
    const float norm = step.gradient_scale * sqrtf(*sum_of_squares);
    if (norm > step.max_norm) scale *= step.max_norm / norm;
  }
  return scale;
}

// One AdamW update of weight i from its scaled gradient g: the moments in
// place, and the new master weight returned (and stored).
__device__ __forceinline__ float AdamWWeight(int64_t i, float g, float* master, float* m_state,
                                             float* v_state, bool decays, const AdamWStep& step) {
  const float m = step.beta1 * m_state[i] + (1.0f - step.beta1) * g;
  const float v = step.beta2 * v_state[i] + (1.0f - step.beta2) * g * g;
  m_state[i] = m;
  v_state[i] = v;
  const float m_hat = m / step.first_correction;
  const float v_hat = v / step.second_correction;
  const float w = master[i];
  const float decay = decays ? step.weight_decay * w : 0.0f;
  const float updated = w - step.learning_rate * (m_hat / (sqrtf(v_hat) + step.epsilon) + decay);
  master[i] = updated;
  return updated;
}

}  // namespace infini::examples::gpt2::gpu::detail
