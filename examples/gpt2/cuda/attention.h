// Fused causal self-attention with heads of 64 (GPT-2's): FlashAttention-2's
// algorithm, in bfloat16 on tensor cores (nvcuda::wmma bf16 16×16×16, float
// accumulation). Q, K and V are read in place from the qkv activation
// [B, T, 3, NH, 64] and the output is written in rows [B, T, NH·64], so no
// head-splitting copies are made and no T × T score matrix is stored: the
// forward keeps one float per query row (the log-sum-exp of its scores) and
// the backward recomputes the probabilities tile by tile from it.
//
// float32 runs the same algorithm on the CUDA cores (float math, no TF32).
// Other head sizes use the unfused path of kernels.h (batched products and
// CausalSoftmax*), which stores the probabilities.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace infini::examples::gpt2::gpu {

// The head size the fused kernels are specialised for.
constexpr int64_t kFusedAttentionHeadSize = 64;

// out[b, t, h·64 + d] = Σ_j≤t softmax_j(q·k_j / 8) v_j[d] for every head h;
// logsumexp[(b·NH + h)·T + t] = log2 Σ_j≤t 2^(q·k_j · log2(e) / 8), kept for
// the backward (B × NH × T floats).
void FusedAttentionForward(__nv_bfloat16* out, float* logsumexp, const __nv_bfloat16* qkv,
                           int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                           cudaStream_t stream);
void FusedAttentionForward(float* out, float* logsumexp, const float* qkv, int64_t batch_size,
                           int64_t sequence_length, int64_t num_heads, cudaStream_t stream);
// The bf16 forward above runs on mma.sync with scores and output in
// registers; this one is its first version, on wmma through shared memory
// (3× slower on the H200), kept as gpt2_kernels_gpu_test's independent
// cross-check of it.
void FusedAttentionForwardWmma(__nv_bfloat16* out, float* logsumexp, const __nv_bfloat16* qkv,
                               int64_t batch_size, int64_t sequence_length, int64_t num_heads,
                               cudaStream_t stream);

// Writes the gradients of Q, K and V into d_qkv (the layout of qkv) from the
// output gradient d_out (the layout of out), with out and logsumexp of the
// forward. `scratch` holds B × NH × T floats (the per-row Σ d_out·out).
void FusedAttentionBackward(__nv_bfloat16* d_qkv, float* scratch, const __nv_bfloat16* d_out,
                            const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                            const float* logsumexp, int64_t batch_size, int64_t sequence_length,
                            int64_t num_heads, cudaStream_t stream);
// The float32 backward in one kernel per key tile that also adds its part
// of dQ = dS·K into d_qkv's Q part with atomics (zeroed here),
// FlashAttention-2's way, instead of a second kernel that recomputes S and
// dP: what the model runs in float32, where the products cost more than the
// atomics. (In bf16 the same was slower than the two kernels on the H200,
// 0.33 ms against 0.28 per d12 layer, and was dropped.)
void FusedAttentionBackwardAccumulatingQueries(float* d_qkv, float* scratch, const float* d_out,
                                               const float* qkv, const float* out,
                                               const float* logsumexp, int64_t batch_size,
                                               int64_t sequence_length, int64_t num_heads,
                                               cudaStream_t stream);
// The first version of the bf16 backward (wmma through shared memory), the
// same cross-check of the mma.sync one above.
void FusedAttentionBackwardWmma(__nv_bfloat16* d_qkv, float* scratch, const __nv_bfloat16* d_out,
                                const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                                const float* logsumexp, int64_t batch_size, int64_t sequence_length,
                                int64_t num_heads, cudaStream_t stream);
// The float32 backward in two kernels like bf16's: what the one-kernel
// float32 backward above is timed and checked against.
void FusedAttentionBackward(float* d_qkv, float* scratch, const float* d_out, const float* qkv,
                            const float* out, const float* logsumexp, int64_t batch_size,
                            int64_t sequence_length, int64_t num_heads, cudaStream_t stream);

}  // namespace infini::examples::gpt2::gpu
