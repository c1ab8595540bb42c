// The CUDA kernels of DeviceModel, one launcher per operation. Activations
// are `T` (float or __nv_bfloat16); every kernel computes in float, and
// parameter gradients are always float. Row-major layouts throughout, as in
// the host model (model.cc): rows = batch × sequence.
//
// Backward launchers ADD into float parameter gradients (they accumulate
// over micro-steps) and into `d_residual`; activation gradients they write.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace infini::examples::gpt2::gpu {

// out[r, c] = token_embedding[tokens[r], c] + position_embedding[r % T, c].
template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* token_embedding,
                      const T* position_embedding, int64_t rows, int64_t sequence_length,
                      int64_t channels, cudaStream_t stream);
template <typename T>
void EmbeddingBackward(float* d_token_embedding, float* d_position_embedding, const T* d_out,
                       const int32_t* tokens, int64_t rows, int64_t sequence_length,
                       int64_t channels, cudaStream_t stream);

// Per row: out = (x − mean) · rstd · weight + bias; mean and rstd kept.
template <typename T>
void LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight, const T* bias,
                      int64_t rows, int64_t channels, cudaStream_t stream);
// d_in += rstd · (g − mean(g) − n · mean(g·n)) with g = dy · weight, n the
// normalized input; d_weight += Σ dy · n, d_bias += Σ dy.
template <typename T>
void LayerNormBackward(T* d_in, float* d_weight, float* d_bias, const T* d_out, const T* in,
                       const T* weight, const float* mean, const float* rstd, int64_t rows,
                       int64_t channels, cudaStream_t stream);

// LayerNormForward with 16-byte loads and stores (8 bf16 or 4 floats per
// lane); LayerNormForward where channels or alignment do not allow it.
template <typename T>
void VectorizedLayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                                const T* bias, int64_t rows, int64_t channels, cudaStream_t stream);
// LayerNormBackward in one kernel that reads d_out and in once: each block
// sums its rows' d_weight and d_bias in shared memory and adds them once
// (LayerNormBackward itself where 2 × channels floats exceed 48 KiB).
template <typename T>
void FusedLayerNormBackward(T* d_in, float* d_weight, float* d_bias, const T* d_out, const T* in,
                            const T* weight, const float* mean, const float* rstd, int64_t rows,
                            int64_t channels, cudaStream_t stream);

// out[r, c] += bias[c] (after a matrix product).
template <typename T>
void AddBias(T* out, const T* bias, int64_t rows, int64_t channels, cudaStream_t stream);
// d_bias[c] += Σ_r d_out[r, c].
template <typename T>
void BiasBackward(float* d_bias, const T* d_out, int64_t rows, int64_t channels,
                  cudaStream_t stream);

// BiasBackward with 16-byte loads: a warp sums 256 (bf16) or 128 (float)
// adjacent columns of a row at once, blocks sum chunks of rows in shared
// memory, then add once. Needs channels divisible by 8 (bf16) or 4 (float)
// and d_out 16-byte aligned; BiasBackward otherwise.
template <typename T>
void VectorizedBiasBackward(float* d_bias, const T* d_out, int64_t rows, int64_t channels,
                            cudaStream_t stream);

// GELU, tanh approximation. GeluBackward writes d_in = gelu'(in) · d_out.
template <typename T>
void GeluForward(T* out, const T* in, int64_t count, cudaStream_t stream);
template <typename T>
void GeluBackward(T* d_in, const T* in, const T* d_out, int64_t count, cudaStream_t stream);

// out = a + b.
template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count, cudaStream_t stream);

// qkv [B, T, 3, NH, hs] → q, k, v each [B, NH, T, hs]; and back (for the
// gradients).
template <typename T>
void SplitHeads(T* q, T* k, T* v, const T* qkv, int64_t batch_size, int64_t sequence_length,
                int64_t num_heads, int64_t head_size, cudaStream_t stream);
template <typename T>
void JoinHeadsQkv(T* qkv, const T* q, const T* k, const T* v, int64_t batch_size,
                  int64_t sequence_length, int64_t num_heads, int64_t head_size,
                  cudaStream_t stream);
// y [B, NH, T, hs] ↔ out [B, T, NH·hs].
template <typename T>
void HeadsToRows(T* out, const T* y, int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                 int64_t head_size, cudaStream_t stream);
template <typename T>
void RowsToHeads(T* y, const T* out, int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                 int64_t head_size, cudaStream_t stream);

// Rows of `row_length` scores (row t of each T×T block sees columns <= t):
// probabilities = causal softmax(scores), zero above the diagonal.
template <typename T>
void CausalSoftmaxForward(T* probabilities, const T* scores, int64_t num_rows,
                          int64_t sequence_length, cudaStream_t stream);
// d_scores = scale · p · (dp − Σ p·dp) on and below the diagonal, 0 above;
// in place (d_scores may be d_probabilities).
template <typename T>
void CausalSoftmaxBackward(T* d_scores, const T* d_probabilities, const T* probabilities,
                           int64_t num_rows, int64_t sequence_length, float scale,
                           cudaStream_t stream);

// Per row of `padded_vocab` logits (the first `vocab` real), in one read:
// logsumexp[r] = log Σ exp(logits) and losses[r] = logsumexp[r] −
// logits[target] (0 where target < 0). The softmax is never stored.
template <typename T>
void CrossEntropyForward(float* losses, float* logsumexp, const T* logits, const int32_t* targets,
                         int64_t rows, int64_t vocab, int64_t padded_vocab, cudaStream_t stream);
// In place, one read and one write: logits become d_logits = scale ·
// (exp(logits − logsumexp) − onehot(target)), 0 in the padding and in a row
// whose target < 0.
template <typename T>
void CrossEntropyBackward(T* logits, const float* logsumexp, const int32_t* targets, int64_t rows,
                          int64_t vocab, int64_t padded_vocab, float scale, cudaStream_t stream);

// The unfused cross-entropy that CrossEntropy* replace, kept as the
// reference of gpt2_kernels_gpu_test.
// Per row of `padded_vocab` logits (the first `vocab` real): logits become
// softmax probabilities in place (0 in the padding), and losses[r] =
// −log p[target] (0 where target < 0).
template <typename T>
void SoftmaxCrossEntropyForward(T* logits, float* losses, const int32_t* targets, int64_t rows,
                                int64_t vocab, int64_t padded_vocab, cudaStream_t stream);
// In place: probabilities become d_logits = scale · (p − onehot(target)),
// all 0 in a row whose target < 0.
template <typename T>
void SoftmaxCrossEntropyBackward(T* probabilities, const int32_t* targets, int64_t rows,
                                 int64_t padded_vocab, float scale, cudaStream_t stream);

// *accumulator += weight · Σ values (one block: deterministic).
void AccumulateSum(float* accumulator, const float* values, int64_t count, float weight,
                   cudaStream_t stream);
// *sum_of_squares += Σ values² (atomic across blocks).
void AddSumOfSquares(float* sum_of_squares, const float* values, int64_t count,
                     cudaStream_t stream);

struct AdamWStep {
  float learning_rate, beta1, beta2, epsilon, weight_decay;
  float first_correction, second_correction;  // 1 − β^t
  float gradient_scale;                       // e.g. 1 / ranks when the reduction summed
  float max_norm;                             // clip the global norm; 0: off
};
// One AdamW update of `count` float master weights from float gradients;
// the gradients are scaled by step.gradient_scale and, when the global norm
// sqrt(*sum_of_squares) (of the scaled gradients) exceeds max_norm, clipped.
// Writes the updated weights into `parameters` too (as T) when it is not
// null.
template <typename T>
void AdamWUpdate(float* master, T* parameters, const float* gradients, float* first_moment,
                 float* second_moment, int64_t count, bool decays, const AdamWStep& step,
                 const float* sum_of_squares, cudaStream_t stream);

// A run of at most kParameterChunkElements parameters inside one piece (one
// tensor of one layer): one block's work in the chunked kernels below,
// which cover every parameter in one launch. Gradients of group g live at
// group_gradients[g] (a device array of pointers), element `offset −
// group_offset` for flat offset `offset`.
struct ParameterChunk {
  int64_t offset;        // in the flat parameter layout
  int64_t group_offset;  // where the chunk's gradient group begins in it
  int32_t count;
  int32_t group;
  int32_t decays;  // weight decay applies
};
constexpr int64_t kParameterChunkElements = 16384;

// *sum_of_squares += Σ gradients² over the chunks (atomic across blocks).
void ChunkedSumOfSquares(float* sum_of_squares, const ParameterChunk* chunks, int64_t num_chunks,
                         const float* const* group_gradients, cudaStream_t stream);
// AdamWUpdate over every chunk's parameters in one launch, the same
// arithmetic per element.
template <typename T>
void ChunkedAdamWUpdate(float* master, T* parameters, float* first_moment, float* second_moment,
                        const ParameterChunk* chunks, int64_t num_chunks,
                        const float* const* group_gradients, const AdamWStep& step,
                        const float* sum_of_squares, cudaStream_t stream);

// parameters[i] = T(master[i]).
template <typename T>
void CopyMasterToParameters(T* parameters, const float* master, int64_t count, cudaStream_t stream);

// values[i] *= scale.
void Scale(float* values, int64_t count, float scale, cudaStream_t stream);

}  // namespace infini::examples::gpt2::gpu
