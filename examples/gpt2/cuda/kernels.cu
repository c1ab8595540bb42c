#include <cfloat>

#include "device_math.cuh"
#include "kernels.h"

namespace infini::examples::gpt2::gpu {
namespace {

using namespace detail;

// ---- Embedding ----

template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int64_t rows, int64_t T_, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * C) return;
  const int64_t row = i / C, c = i % C;
  out[i] = FromFloat<T>(ToFloat(wte[tokens[row] * C + c]) + ToFloat(wpe[(row % T_) * C + c]));
}

template <typename T>
__global__ void EmbeddingBackwardKernel(float* d_wte, float* d_wpe, const T* d_out,
                                        const int32_t* tokens, int64_t rows, int64_t T_,
                                        int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * C) return;
  const int64_t row = i / C, c = i % C;
  const float g = ToFloat(d_out[i]);
  atomicAdd(d_wte + tokens[row] * C + c, g);
  atomicAdd(d_wpe + (row % T_) * C + c, g);
}

// ---- LayerNorm: one warp per row ----

template <typename T>
__global__ void LayerNormForwardKernel(T* out, float* mean_out, float* rstd_out, const T* in,
                                       const T* weight, const T* bias, int64_t rows, int64_t C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* x = in + row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += ToFloat(x[c]);
  const float mean = WarpSum(sum) / static_cast<float>(C);
  float squares = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = ToFloat(x[c]) - mean;
    squares += d * d;
  }
  const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(C) + kLayerNormEpsilon);
  T* y = out + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    y[c] = FromFloat<T>((ToFloat(x[c]) - mean) * rstd * ToFloat(weight[c]) + ToFloat(bias[c]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void LayerNormInputGradientKernel(T* d_in, const T* d_out, const T* in, const T* weight,
                                             const float* mean, const float* rstd, int64_t rows,
                                             int64_t C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* dy = d_out + row * C;
  const T* x = in + row * C;
  const float m = mean[row], r = rstd[row];
  float sum_g = 0.0f, sum_gn = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (ToFloat(x[c]) - m) * r;
    const float g = ToFloat(dy[c]) * ToFloat(weight[c]);
    sum_g += g;
    sum_gn += g * n;
  }
  const float mean_g = WarpSum(sum_g) / static_cast<float>(C);
  const float mean_gn = WarpSum(sum_gn) / static_cast<float>(C);
  T* dx = d_in + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (ToFloat(x[c]) - m) * r;
    const float g = ToFloat(dy[c]) * ToFloat(weight[c]);
    dx[c] = FromFloat<T>(ToFloat(dx[c]) + r * (g - mean_g - n * mean_gn));
  }
}

// Column sums over rows, one block of 32 columns × 8 row lanes per
// (column tile, row chunk); chunks meet through atomicAdd.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 8;
constexpr int kRowChunks = 32;

template <typename T>
__global__ void LayerNormParameterGradientKernel(float* d_weight, float* d_bias, const T* d_out,
                                                 const T* in, const float* mean, const float* rstd,
                                                 int64_t rows, int64_t C) {
  __shared__ float weight_sums[kRowLanes][kColumnTile];
  __shared__ float bias_sums[kRowLanes][kColumnTile];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kColumnTile) + threadIdx.x;
  float weight_sum = 0.0f, bias_sum = 0.0f;
  if (c < C) {
    for (int64_t row = blockIdx.y * static_cast<int64_t>(kRowLanes) + threadIdx.y; row < rows;
         row += static_cast<int64_t>(gridDim.y) * kRowLanes) {
      const float dy = ToFloat(d_out[row * C + c]);
      weight_sum += dy * (ToFloat(in[row * C + c]) - mean[row]) * rstd[row];
      bias_sum += dy;
    }
  }
  weight_sums[threadIdx.y][threadIdx.x] = weight_sum;
  bias_sums[threadIdx.y][threadIdx.x] = bias_sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int lane = 1; lane < kRowLanes; ++lane) {
      weight_sum += weight_sums[lane][threadIdx.x];
      bias_sum += bias_sums[lane][threadIdx.x];
    }
    atomicAdd(d_weight + c, weight_sum);
    atomicAdd(d_bias + c, bias_sum);
  }
}

template <typename T>
__global__ void BiasBackwardKernel(float* d_bias, const T* d_out, int64_t rows, int64_t C) {
  __shared__ float sums[kRowLanes][kColumnTile];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kColumnTile) + threadIdx.x;
  float sum = 0.0f;
  if (c < C) {
    for (int64_t row = blockIdx.y * static_cast<int64_t>(kRowLanes) + threadIdx.y; row < rows;
         row += static_cast<int64_t>(gridDim.y) * kRowLanes) {
      sum += ToFloat(d_out[row * C + c]);
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int lane = 1; lane < kRowLanes; ++lane) sum += sums[lane][threadIdx.x];
    atomicAdd(d_bias + c, sum);
  }
}

dim3 ColumnGrid(int64_t rows, int64_t C) {
  const int64_t chunks = (rows + kRowLanes - 1) / kRowLanes;
  return dim3(static_cast<unsigned>((C + kColumnTile - 1) / kColumnTile),
              static_cast<unsigned>(chunks < kRowChunks ? chunks : kRowChunks));
}

template <typename T>
__global__ void AddBiasKernel(T* out, const T* bias, int64_t rows, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * C) return;
  out[i] = FromFloat<T>(ToFloat(out[i]) + ToFloat(bias[i % C]));
}

// ---- Elementwise ----

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluCubic = 0.044715f;

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* in, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float x = ToFloat(in[i]);
  out[i] = FromFloat<T>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x))));
}

template <typename T>
__global__ void GeluBackwardKernel(T* d_in, const T* in, const T* d_out, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float x = ToFloat(in[i]);
  const float tanh_inner = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - tanh_inner * tanh_inner;
  const float derivative = 0.5f * (1.0f + tanh_inner) +
                           0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  d_in[i] = FromFloat<T>(derivative * ToFloat(d_out[i]));
}

template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
}

// ---- Attention layout ----

// Element i of a [B, NH, T, hs] tensor; its place in [B, T, parts, NH, hs].
__device__ __forceinline__ int64_t RowsIndex(int64_t i, int64_t B_, int64_t NH, int64_t T_,
                                             int64_t hs, int64_t parts, int64_t part) {
  (void)B_;
  const int64_t d = i % hs;
  const int64_t t = (i / hs) % T_;
  const int64_t h = (i / (hs * T_)) % NH;
  const int64_t b = i / (hs * T_ * NH);
  return ((b * T_ + t) * parts + part) * NH * hs + h * hs + d;
}

template <typename T>
__global__ void SplitHeadsKernel(T* q, T* k, T* v, const T* qkv, int64_t B_, int64_t T_, int64_t NH,
                                 int64_t hs) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= B_ * NH * T_ * hs) return;
  q[i] = qkv[RowsIndex(i, B_, NH, T_, hs, 3, 0)];
  k[i] = qkv[RowsIndex(i, B_, NH, T_, hs, 3, 1)];
  v[i] = qkv[RowsIndex(i, B_, NH, T_, hs, 3, 2)];
}

template <typename T>
__global__ void JoinHeadsQkvKernel(T* qkv, const T* q, const T* k, const T* v, int64_t B_,
                                   int64_t T_, int64_t NH, int64_t hs) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= B_ * NH * T_ * hs) return;
  qkv[RowsIndex(i, B_, NH, T_, hs, 3, 0)] = q[i];
  qkv[RowsIndex(i, B_, NH, T_, hs, 3, 1)] = k[i];
  qkv[RowsIndex(i, B_, NH, T_, hs, 3, 2)] = v[i];
}

template <typename T>
__global__ void HeadsToRowsKernel(T* out, const T* y, int64_t B_, int64_t T_, int64_t NH,
                                  int64_t hs) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= B_ * NH * T_ * hs) return;
  out[RowsIndex(i, B_, NH, T_, hs, 1, 0)] = y[i];
}

template <typename T>
__global__ void RowsToHeadsKernel(T* y, const T* out, int64_t B_, int64_t T_, int64_t NH,
                                  int64_t hs) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= B_ * NH * T_ * hs) return;
  y[i] = out[RowsIndex(i, B_, NH, T_, hs, 1, 0)];
}

// ---- Causal softmax: one warp per row of T scores; row r is query t = r % T ----

template <typename T>
__global__ void CausalSoftmaxForwardKernel(T* p, const T* scores, int64_t num_rows, int64_t T_) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= num_rows) return;
  const int64_t t = row % T_;
  const T* s = scores + row * T_;
  T* out = p + row * T_;
  float max_score = -FLT_MAX;
  for (int64_t j = lane; j <= t; j += 32) max_score = fmaxf(max_score, ToFloat(s[j]));
  max_score = WarpMax(max_score);
  float sum = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) sum += expf(ToFloat(s[j]) - max_score);
  const float inverse = 1.0f / WarpSum(sum);
  for (int64_t j = lane; j < T_; j += 32) {
    out[j] = FromFloat<T>(j <= t ? expf(ToFloat(s[j]) - max_score) * inverse : 0.0f);
  }
}

template <typename T>
__global__ void CausalSoftmaxBackwardKernel(T* d_scores, const T* d_p, const T* p, int64_t num_rows,
                                            int64_t T_, float scale) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= num_rows) return;
  const int64_t t = row % T_;
  const T* dp_row = d_p + row * T_;
  const T* p_row = p + row * T_;
  T* ds_row = d_scores + row * T_;
  float weighted = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) weighted += ToFloat(p_row[j]) * ToFloat(dp_row[j]);
  weighted = WarpSum(weighted);
  // Each lane reads and writes only its own columns: in place is safe.
  for (int64_t j = lane; j < T_; j += 32) {
    const float value = j <= t ? scale * ToFloat(p_row[j]) * (ToFloat(dp_row[j]) - weighted) : 0.0f;
    ds_row[j] = FromFloat<T>(value);
  }
}

// ---- Cross-entropy: one block per row ----

template <typename T>
__global__ void SoftmaxCrossEntropyForwardKernel(T* logits, float* losses, const int32_t* targets,
                                                 int64_t V, int64_t Vp) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * Vp;
  const int32_t target = targets[row];
  // Read before any thread overwrites the row.
  const float target_logit = target >= 0 ? ToFloat(x[target]) : 0.0f;
  float max_logit = -FLT_MAX;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) max_logit = fmaxf(max_logit, ToFloat(x[v]));
  max_logit = BlockReduce<true>(max_logit, shared);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(ToFloat(x[v]) - max_logit);
  sum = BlockReduce<false>(sum, shared);
  // BlockReduce ends after its barrier: every thread has read the logits it
  // needs, so the row may be overwritten.
  const float inverse = 1.0f / sum;
  for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
    x[v] = FromFloat<T>(v < V ? expf(ToFloat(x[v]) - max_logit) * inverse : 0.0f);
  }
  if (threadIdx.x == 0) {
    losses[row] = target >= 0 ? logf(sum) + max_logit - target_logit : 0.0f;
  }
}

template <typename T>
__global__ void SoftmaxCrossEntropyBackwardKernel(T* p, const int32_t* targets, int64_t rows,
                                                  int64_t Vp, float scale) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * Vp) return;
  const int64_t row = i / Vp, v = i % Vp;
  const int32_t target = targets[row];
  if (target < 0) {
    p[i] = FromFloat<T>(0.0f);
    return;
  }
  const float onehot = v == target ? 1.0f : 0.0f;
  p[i] = FromFloat<T>(scale * (ToFloat(p[i]) - onehot));
}

// ---- Reductions and the optimizer ----

__global__ void AccumulateSumKernel(float* accumulator, const float* values, int64_t count,
                                    float weight) {
  __shared__ float shared[kThreads / 32];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += values[i];
  sum = BlockReduce<false>(sum, shared);
  if (threadIdx.x == 0) *accumulator += weight * sum;
}

__global__ void AddSumOfSquaresKernel(float* sum_of_squares, const float* values, int64_t count) {
  __shared__ float shared[kThreads / 32];
  float sum = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    sum += values[i] * values[i];
  }
  sum = BlockReduce<false>(sum, shared);
  if (threadIdx.x == 0) atomicAdd(sum_of_squares, sum);
}

template <typename T>
__global__ void AdamWKernel(float* master, T* parameters, const float* gradients, float* m_state,
                            float* v_state, int64_t count, bool decays, AdamWStep step,
                            const float* sum_of_squares) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float g = gradients[i] * AdamWGradientScale(step, sum_of_squares);
  const float updated = AdamWWeight(i, g, master, m_state, v_state, decays, step);
  if (parameters != nullptr) parameters[i] = FromFloat<T>(updated);
}

template <typename T>
__global__ void CopyMasterKernel(T* parameters, const float* master, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) parameters[i] = FromFloat<T>(master[i]);
}

__global__ void ScaleKernel(float* values, int64_t count, float scale) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) values[i] *= scale;
}

// Rows handled by one block of warp-per-row kernels.
constexpr int kRowsPerBlock = kThreads / 32;

}  // namespace

template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* token_embedding,
                      const T* position_embedding, int64_t rows, int64_t sequence_length,
                      int64_t channels, cudaStream_t stream) {
  EmbeddingForwardKernel<<<Blocks(rows * channels), kThreads, 0, stream>>>(
      out, tokens, token_embedding, position_embedding, rows, sequence_length, channels);
}

template <typename T>
void EmbeddingBackward(float* d_token_embedding, float* d_position_embedding, const T* d_out,
                       const int32_t* tokens, int64_t rows, int64_t sequence_length,
                       int64_t channels, cudaStream_t stream) {
  EmbeddingBackwardKernel<<<Blocks(rows * channels), kThreads, 0, stream>>>(
      d_token_embedding, d_position_embedding, d_out, tokens, rows, sequence_length, channels);
}

template <typename T>
void LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight, const T* bias,
                      int64_t rows, int64_t channels, cudaStream_t stream) {
  LayerNormForwardKernel<<<Blocks(rows, kRowsPerBlock), kThreads, 0, stream>>>(
      out, mean, rstd, in, weight, bias, rows, channels);
}

template <typename T>
void LayerNormBackward(T* d_in, float* d_weight, float* d_bias, const T* d_out, const T* in,
                       const T* weight, const float* mean, const float* rstd, int64_t rows,
                       int64_t channels, cudaStream_t stream) {
  LayerNormInputGradientKernel<<<Blocks(rows, kRowsPerBlock), kThreads, 0, stream>>>(
      d_in, d_out, in, weight, mean, rstd, rows, channels);
  LayerNormParameterGradientKernel<<<ColumnGrid(rows, channels), dim3(kColumnTile, kRowLanes), 0,
                                     stream>>>(d_weight, d_bias, d_out, in, mean, rstd, rows,
                                               channels);
}

template <typename T>
void AddBias(T* out, const T* bias, int64_t rows, int64_t channels, cudaStream_t stream) {
  AddBiasKernel<<<Blocks(rows * channels), kThreads, 0, stream>>>(out, bias, rows, channels);
}

template <typename T>
void BiasBackward(float* d_bias, const T* d_out, int64_t rows, int64_t channels,
                  cudaStream_t stream) {
  BiasBackwardKernel<<<ColumnGrid(rows, channels), dim3(kColumnTile, kRowLanes), 0, stream>>>(
      d_bias, d_out, rows, channels);
}

template <typename T>
void GeluForward(T* out, const T* in, int64_t count, cudaStream_t stream) {
  GeluForwardKernel<<<Blocks(count), kThreads, 0, stream>>>(out, in, count);
}

template <typename T>
void GeluBackward(T* d_in, const T* in, const T* d_out, int64_t count, cudaStream_t stream) {
  GeluBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(d_in, in, d_out, count);
}

template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count, cudaStream_t stream) {
  AddKernel<<<Blocks(count), kThreads, 0, stream>>>(out, a, b, count);
}

template <typename T>
void SplitHeads(T* q, T* k, T* v, const T* qkv, int64_t batch_size, int64_t sequence_length,
                int64_t num_heads, int64_t head_size, cudaStream_t stream) {
  const int64_t count = batch_size * num_heads * sequence_length * head_size;
  SplitHeadsKernel<<<Blocks(count), kThreads, 0, stream>>>(q, k, v, qkv, batch_size,
                                                           sequence_length, num_heads, head_size);
}

template <typename T>
void JoinHeadsQkv(T* qkv, const T* q, const T* k, const T* v, int64_t batch_size,
                  int64_t sequence_length, int64_t num_heads, int64_t head_size,
                  cudaStream_t stream) {
  const int64_t count = batch_size * num_heads * sequence_length * head_size;
  JoinHeadsQkvKernel<<<Blocks(count), kThreads, 0, stream>>>(qkv, q, k, v, batch_size,
                                                             sequence_length, num_heads, head_size);
}

template <typename T>
void HeadsToRows(T* out, const T* y, int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                 int64_t head_size, cudaStream_t stream) {
  const int64_t count = batch_size * num_heads * sequence_length * head_size;
  HeadsToRowsKernel<<<Blocks(count), kThreads, 0, stream>>>(out, y, batch_size, sequence_length,
                                                            num_heads, head_size);
}

template <typename T>
void RowsToHeads(T* y, const T* out, int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                 int64_t head_size, cudaStream_t stream) {
  const int64_t count = batch_size * num_heads * sequence_length * head_size;
  RowsToHeadsKernel<<<Blocks(count), kThreads, 0, stream>>>(y, out, batch_size, sequence_length,
                                                            num_heads, head_size);
}

template <typename T>
void CausalSoftmaxForward(T* probabilities, const T* scores, int64_t num_rows,
                          int64_t sequence_length, cudaStream_t stream) {
  CausalSoftmaxForwardKernel<<<Blocks(num_rows, kRowsPerBlock), kThreads, 0, stream>>>(
      probabilities, scores, num_rows, sequence_length);
}

template <typename T>
void CausalSoftmaxBackward(T* d_scores, const T* d_probabilities, const T* probabilities,
                           int64_t num_rows, int64_t sequence_length, float scale,
                           cudaStream_t stream) {
  CausalSoftmaxBackwardKernel<<<Blocks(num_rows, kRowsPerBlock), kThreads, 0, stream>>>(
      d_scores, d_probabilities, probabilities, num_rows, sequence_length, scale);
}

template <typename T>
void SoftmaxCrossEntropyForward(T* logits, float* losses, const int32_t* targets, int64_t rows,
                                int64_t vocab, int64_t padded_vocab, cudaStream_t stream) {
  SoftmaxCrossEntropyForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      logits, losses, targets, vocab, padded_vocab);
}

template <typename T>
void SoftmaxCrossEntropyBackward(T* probabilities, const int32_t* targets, int64_t rows,
                                 int64_t padded_vocab, float scale, cudaStream_t stream) {
  SoftmaxCrossEntropyBackwardKernel<<<Blocks(rows * padded_vocab), kThreads, 0, stream>>>(
      probabilities, targets, rows, padded_vocab, scale);
}

void AccumulateSum(float* accumulator, const float* values, int64_t count, float weight,
                   cudaStream_t stream) {
  AccumulateSumKernel<<<1, kThreads, 0, stream>>>(accumulator, values, count, weight);
}

void AddSumOfSquares(float* sum_of_squares, const float* values, int64_t count,
                     cudaStream_t stream) {
  const unsigned wanted = Blocks(count);
  const unsigned blocks = wanted == 0 ? 1u : (wanted < 1024u ? wanted : 1024u);
  AddSumOfSquaresKernel<<<blocks, kThreads, 0, stream>>>(sum_of_squares, values, count);
}

template <typename T>
void AdamWUpdate(float* master, T* parameters, const float* gradients, float* first_moment,
                 float* second_moment, int64_t count, bool decays, const AdamWStep& step,
                 const float* sum_of_squares, cudaStream_t stream) {
  AdamWKernel<<<Blocks(count), kThreads, 0, stream>>>(master, parameters, gradients, first_moment,
                                                      second_moment, count, decays, step,
                                                      sum_of_squares);
}

template <typename T>
void CopyMasterToParameters(T* parameters, const float* master, int64_t count,
                            cudaStream_t stream) {
  CopyMasterKernel<<<Blocks(count), kThreads, 0, stream>>>(parameters, master, count);
}

void Scale(float* values, int64_t count, float scale, cudaStream_t stream) {
  ScaleKernel<<<Blocks(count), kThreads, 0, stream>>>(values, count, scale);
}

#define INFINI_GPT2_INSTANTIATE(T)                                                                \
  template void EmbeddingForward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,     \
                                    int64_t, cudaStream_t);                                       \
  template void EmbeddingBackward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t,  \
                                     int64_t, cudaStream_t);                                      \
  template void LayerNormForward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t,    \
                                    int64_t, cudaStream_t);                                       \
  template void LayerNormBackward<T>(T*, float*, float*, const T*, const T*, const T*,            \
                                     const float*, const float*, int64_t, int64_t, cudaStream_t); \
  template void AddBias<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                         \
  template void BiasBackward<T>(float*, const T*, int64_t, int64_t, cudaStream_t);                \
  template void GeluForward<T>(T*, const T*, int64_t, cudaStream_t);                              \
  template void GeluBackward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                   \
  template void Add<T>(T*, const T*, const T*, int64_t, cudaStream_t);                            \
  template void SplitHeads<T>(T*, T*, T*, const T*, int64_t, int64_t, int64_t, int64_t,           \
                              cudaStream_t);                                                      \
  template void JoinHeadsQkv<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,      \
                                int64_t, cudaStream_t);                                           \
  template void HeadsToRows<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);   \
  template void RowsToHeads<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);   \
  template void CausalSoftmaxForward<T>(T*, const T*, int64_t, int64_t, cudaStream_t);            \
  template void CausalSoftmaxBackward<T>(T*, const T*, const T*, int64_t, int64_t, float,         \
                                         cudaStream_t);                                           \
  template void SoftmaxCrossEntropyForward<T>(T*, float*, const int32_t*, int64_t, int64_t,       \
                                              int64_t, cudaStream_t);                             \
  template void SoftmaxCrossEntropyBackward<T>(T*, const int32_t*, int64_t, int64_t, float,       \
                                               cudaStream_t);                                     \
  template void AdamWUpdate<T>(float*, T*, const float*, float*, float*, int64_t, bool,           \
                               const AdamWStep&, const float*, cudaStream_t);                     \
  template void CopyMasterToParameters<T>(T*, const float*, int64_t, cudaStream_t);

INFINI_GPT2_INSTANTIATE(float)
INFINI_GPT2_INSTANTIATE(__nv_bfloat16)

}  // namespace infini::examples::gpt2::gpu
