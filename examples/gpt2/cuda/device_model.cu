#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "attention.h"
#include "device_model.h"
#include "fused_matmul.h"
#include "kernels.h"

namespace infini::examples::gpt2::gpu {
namespace {

// Tensor kinds, in the host model's order (model.cc): tensors()[kind].
enum Kind {
  kTokenEmbedding,
  kPositionEmbedding,
  kLn1Weight,
  kLn1Bias,
  kQkvWeight,
  kQkvBias,
  kAttnProjWeight,
  kAttnProjBias,
  kLn2Weight,
  kLn2Bias,
  kFcWeight,
  kFcBias,
  kFcProjWeight,
  kFcProjBias,
  kLnfWeight,
  kLnfBias,
  kNumKinds
};
constexpr int kFirstLayerKind = kLn1Weight;
constexpr int kLastLayerKind = kFcProjBias;

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
  }
}

void Check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(status));
  }
}

// Device memory of `count` elements of E, freed with the owner.
template <typename E>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(int64_t count) : count_(count) {
    if (count <= 0) return;
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, static_cast<size_t>(count) * sizeof(E));
    if (status != cudaSuccess) {
      throw std::runtime_error("gpt2: cannot allocate " +
                               std::to_string(static_cast<size_t>(count) * sizeof(E) >> 20) +
                               " MiB on the GPU (" + cudaGetErrorString(status) +
                               "): use a smaller --batch_size or --sequence_length");
    }
    data_ = static_cast<E*>(data);
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(DeviceArray&& other) noexcept { *this = std::move(other); }
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  E* get() const { return data_; }
  int64_t count() const { return count_; }

 private:
  E* data_ = nullptr;
  int64_t count_ = 0;
};

// One parameter tensor (one kind of one layer) in both layouts.
struct Piece {
  int kind = 0;
  int64_t layer = 0;
  int64_t device_offset = 0;
  int64_t host_offset = 0;
  int64_t count = 0;
  size_t group = 0;
  bool decays = false;
};

template <typename T>
constexpr cudaDataType_t kCudaType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;

}  // namespace

struct DeviceModel::State {
  ModelConfig config;
  DeviceDtype dtype;
  int64_t padded_vocab = 0;
  int64_t max_batch = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::unique_ptr<FusedMatmul> fused_matmul;

  std::vector<GradientGroup> groups;
  std::vector<Piece> pieces;                 // device order
  int64_t piece_index[kNumKinds][256] = {};  // [kind][layer] → pieces index
  int64_t num_parameters = 0;

  DeviceArray<float> master, first_moment, second_moment, owned_gradients;
  DeviceArray<__nv_bfloat16> bf16_parameters;  // --dtype=bfloat16 only
  std::vector<float*> gradient_storage;        // per group
  // The optimizer's work in one launch: every piece cut into chunks, and the
  // groups' gradient pointers on the device (re-sent when one moves).
  DeviceArray<ParameterChunk> chunks;
  DeviceArray<const float*> device_gradient_storage;
  bool device_gradient_storage_stale = true;

  DeviceArray<int32_t> inputs, targets;
  int64_t batch = 0, sequence = 0, counted_targets = 0;
  DeviceArray<float> losses, loss_accumulator, sum_of_squares;
  float last_gradient_scale = 1.0f;

  // Heads of 64: attention.h's fused kernels (no T × T buffers); otherwise
  // the unfused batched products and softmax.
  bool fused_attention = false;

  // Activations in the model's dtype (as bytes; typed by Run<T>), and float
  // layernorm statistics. Per-layer ones hold L slices of `capacity` rows.
  // The fused attention keeps L slices of B × NH × T log-sum-exps instead of
  // the probabilities, and needs none of q … d_y.
  struct Activations {
    DeviceArray<char> embedded, ln1, qkv, attention_out, probabilities, residual2, ln2, fc, fc_gelu,
        residual3, lnf, logits;
    DeviceArray<char> q, k, v, scores, y, projection;
    DeviceArray<char> d_residual, d_ln, d_qkv, d_q, d_k, d_v, d_scores, d_y, d_attention_out, d_fc,
        d_fc_gelu;
    DeviceArray<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, lnf_mean, lnf_rstd;
    DeviceArray<float> attention_lse, attention_dots, logits_lse;
  } a;

  const Piece& piece(int kind, int64_t layer) const {
    return pieces[static_cast<size_t>(piece_index[kind][layer])];
  }
  template <typename T>
  const T* param(int kind, int64_t layer = 0) const {
    const int64_t offset = piece(kind, layer).device_offset;
    if constexpr (std::is_same_v<T, float>) {
      return master.get() + offset;
    } else {
      return bf16_parameters.get() + offset;
    }
  }
  float* grad(int kind, int64_t layer = 0) const {
    const Piece& p = piece(kind, layer);
    return gradient_storage[p.group] + (p.device_offset - groups[p.group].offset);
  }

  template <typename T>
  void Linear(T* out, const T* in, int kind_weight, int kind_bias, int64_t layer, int64_t rows,
              int64_t in_channels, int64_t out_channels);
  template <typename T>
  void LinearResidual(T* out, const T* in, const T* residual, int kind_weight, int kind_bias,
                      int64_t layer, int64_t rows, int64_t in_channels, int64_t out_channels);
  template <typename T>
  void LinearGelu(T* gelu_out, T* gelu_in, const T* in, int kind_weight, int kind_bias,
                  int64_t layer, int64_t rows, int64_t in_channels, int64_t out_channels);
  template <typename T>
  void LinearBackward(T* d_in, const T* d_out, const T* in, int kind_weight, int kind_bias,
                      int64_t layer, int64_t rows, int64_t in_channels, int64_t out_channels,
                      T* gelu_in = nullptr, T* scratch = nullptr);
  template <typename T>
  void BatchedGemm(cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n,
                   int64_t k, float alpha, const T* a_matrix, int64_t lda, int64_t stride_a,
                   const T* b_matrix, int64_t ldb, int64_t stride_b, T* c_matrix, int64_t ldc,
                   int64_t stride_c, int64_t batch_count);
  template <typename T>
  void RunForward(float loss_weight);
  template <typename T>
  void RunBackward(float loss_scale, const std::function<void(size_t)>& group_ready);
};

namespace {

template <typename T>
T* Typed(const DeviceArray<char>& array, int64_t element_offset = 0) {
  return reinterpret_cast<T*>(array.get()) + element_offset;
}

}  // namespace

// out[rows × OC] = in[rows × IC] · Wᵀ (+ bias), W stored [OC × IC] row-major.
// Column-major, as cuBLAS sees it: out (OC × rows) = Wᵀ-view (OC × IC, op T
// of the IC × OC matrix W) · in (IC × rows).
template <typename T>
void DeviceModel::State::Linear(T* out, const T* in, int kind_weight, int kind_bias, int64_t layer,
                                int64_t rows, int64_t in_channels, int64_t out_channels) {
  if (kind_bias >= 0 && fused_matmul->Run<T>(Epilogue::kBias, true, out_channels, rows, in_channels,
                                             param<T>(kind_weight, layer), in, out,
                                             param<T>(kind_bias, layer), nullptr)) {
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  Check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out_channels),
                     static_cast<int>(rows), static_cast<int>(in_channels), &one,
                     param<T>(kind_weight, layer), kCudaType<T>, static_cast<int>(in_channels), in,
                     kCudaType<T>, static_cast<int>(in_channels), &zero, out, kCudaType<T>,
                     static_cast<int>(out_channels), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "linear forward");
  if (kind_bias >= 0) AddBias(out, param<T>(kind_bias, layer), rows, out_channels, stream);
}

// out = residual + in · Wᵀ + bias: a branch's projection and the residual
// add in one product where cuBLASLt can (`projection` is the scratch of the
// unfused way).
template <typename T>
void DeviceModel::State::LinearResidual(T* out, const T* in, const T* residual, int kind_weight,
                                        int kind_bias, int64_t layer, int64_t rows,
                                        int64_t in_channels, int64_t out_channels) {
  if (fused_matmul->Run<T>(Epilogue::kBias, true, out_channels, rows, in_channels,
                           param<T>(kind_weight, layer), in, out, param<T>(kind_bias, layer),
                           nullptr, residual)) {
    return;
  }
  Linear(Typed<T>(a.projection), in, kind_weight, kind_bias, layer, rows, in_channels,
         out_channels);
  Add(out, residual, Typed<T>(a.projection), rows * out_channels, stream);
}

// The MLP's first layer: gelu_in = in · Wᵀ + bias, gelu_out = gelu(gelu_in).
// In bfloat16 one product with cuBLASLt's GELU epilogue; float32 keeps
// GeluForward (the host path's tanh formula, which its tests compare with).
template <typename T>
void DeviceModel::State::LinearGelu(T* gelu_out, T* gelu_in, const T* in, int kind_weight,
                                    int kind_bias, int64_t layer, int64_t rows, int64_t in_channels,
                                    int64_t out_channels) {
  if (std::is_same_v<T, __nv_bfloat16> &&
      fused_matmul->Run<T>(Epilogue::kGeluBias, true, out_channels, rows, in_channels,
                           param<T>(kind_weight, layer), in, gelu_out, param<T>(kind_bias, layer),
                           gelu_in)) {
    return;
  }
  Linear(gelu_in, in, kind_weight, kind_bias, layer, rows, in_channels, out_channels);
  GeluForward(gelu_out, gelu_in, rows * out_channels, stream);
}

// d_in (IC × rows) = W (IC × OC) · d_out (OC × rows);
// dW (IC × OC) += in (IC × rows) · d_outᵀ (rows × OC), in float.
// With `gelu_in` (the input of a GELU whose output was `in`'s source), d_in
// is the gradient at the GELU's input instead: gelu'(gelu_in) ∘ (W · d_out),
// through `scratch` (IC × rows) where cuBLASLt's epilogue cannot.
template <typename T>
void DeviceModel::State::LinearBackward(T* d_in, const T* d_out, const T* in, int kind_weight,
                                        int kind_bias, int64_t layer, int64_t rows,
                                        int64_t in_channels, int64_t out_channels, T* gelu_in,
                                        T* scratch) {
  const bool fused_gelu =
      gelu_in != nullptr && std::is_same_v<T, __nv_bfloat16> &&
      fused_matmul->Run<T>(Epilogue::kGeluGradient, false, in_channels, rows, out_channels,
                           param<T>(kind_weight, layer), d_out, d_in, nullptr, gelu_in);
  const float one = 1.0f, zero = 0.0f;
  if (!fused_gelu) {
    T* product = gelu_in != nullptr ? scratch : d_in;
    Check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(in_channels),
                       static_cast<int>(rows), static_cast<int>(out_channels), &one,
                       param<T>(kind_weight, layer), kCudaType<T>, static_cast<int>(in_channels),
                       d_out, kCudaType<T>, static_cast<int>(out_channels), &zero, product,
                       kCudaType<T>, static_cast<int>(in_channels), CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "linear backward (input)");
    if (gelu_in != nullptr) GeluBackward(d_in, gelu_in, product, rows * in_channels, stream);
  }
  Check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(in_channels),
                     static_cast<int>(out_channels), static_cast<int>(rows), &one, in, kCudaType<T>,
                     static_cast<int>(in_channels), d_out, kCudaType<T>,
                     static_cast<int>(out_channels), &one, grad(kind_weight, layer), CUDA_R_32F,
                     static_cast<int>(in_channels), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "linear backward (weight)");
  if (kind_bias >= 0) {
    VectorizedBiasBackward(grad(kind_bias, layer), d_out, rows, out_channels, stream);
  }
}

template <typename T>
void DeviceModel::State::BatchedGemm(cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                                     int64_t n, int64_t k, float alpha, const T* a_matrix,
                                     int64_t lda, int64_t stride_a, const T* b_matrix, int64_t ldb,
                                     int64_t stride_b, T* c_matrix, int64_t ldc, int64_t stride_c,
                                     int64_t batch_count) {
  const float zero = 0.0f;
  Check(cublasGemmStridedBatchedEx(
            blas, transa, transb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
            &alpha, a_matrix, kCudaType<T>, static_cast<int>(lda), stride_a, b_matrix, kCudaType<T>,
            static_cast<int>(ldb), stride_b, &zero, c_matrix, kCudaType<T>, static_cast<int>(ldc),
            stride_c, static_cast<int>(batch_count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "attention batched product");
}

template <typename T>
void DeviceModel::State::RunForward(float loss_weight) {
  const int64_t B = batch, T_ = sequence, C = config.channels, L = config.num_layers;
  const int64_t NH = config.num_heads, hs = C / NH, V = config.vocab_size, Vp = padded_vocab;
  const int64_t rows = B * T_;
  const int64_t capacity = max_batch * config.max_sequence_length;  // rows per layer slice
  const int64_t attention_capacity =
      max_batch * NH * config.max_sequence_length * config.max_sequence_length;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));

  EmbeddingForward(Typed<T>(a.embedded), inputs.get(), param<T>(kTokenEmbedding),
                   param<T>(kPositionEmbedding), rows, T_, C, stream);
  const T* residual = Typed<T>(a.embedded);
  for (int64_t l = 0; l < L; ++l) {
    T* ln1 = Typed<T>(a.ln1, l * capacity * C);
    T* qkv = Typed<T>(a.qkv, l * capacity * 3 * C);
    T* attention_out = Typed<T>(a.attention_out, l * capacity * C);
    T* residual2 = Typed<T>(a.residual2, l * capacity * C);
    T* ln2 = Typed<T>(a.ln2, l * capacity * C);
    T* fc = Typed<T>(a.fc, l * capacity * 4 * C);
    T* fc_gelu = Typed<T>(a.fc_gelu, l * capacity * 4 * C);
    T* residual3 = Typed<T>(a.residual3, l * capacity * C);

    VectorizedLayerNormForward(ln1, a.ln1_mean.get() + l * capacity,
                               a.ln1_rstd.get() + l * capacity, residual, param<T>(kLn1Weight, l),
                               param<T>(kLn1Bias, l), rows, C, stream);
    Linear(qkv, ln1, kQkvWeight, kQkvBias, l, rows, C, 3 * C);

    if (fused_attention) {
      FusedAttentionForward(attention_out, a.attention_lse.get() + l * capacity * NH, qkv, B, T_,
                            NH, stream);
    } else {
      // Attention per (b, h): S = scale · Q·Kᵀ (T × T, row t = query t), the
      // causal softmax P, then Y = P·V. Row-major S is column-major Sᵀ =
      // K·Qᵀ: op T of K (hs × T) times Q (hs × T).
      T* probabilities = Typed<T>(a.probabilities, l * attention_capacity);
      T* q = Typed<T>(a.q);
      T* k = Typed<T>(a.k);
      T* v = Typed<T>(a.v);
      SplitHeads(q, k, v, qkv, B, T_, NH, hs, stream);
      BatchedGemm<T>(CUBLAS_OP_T, CUBLAS_OP_N, T_, T_, hs, scale, k, hs, T_ * hs, q, hs, T_ * hs,
                     Typed<T>(a.scores), T_, T_ * T_, B * NH);
      CausalSoftmaxForward(probabilities, Typed<T>(a.scores), B * NH * T_, T_, stream);
      // Yᵀ (hs × T) = Vᵀ (hs × T) · Pᵀ (T × T, P row-major read column-major).
      BatchedGemm<T>(CUBLAS_OP_N, CUBLAS_OP_N, hs, T_, T_, 1.0f, v, hs, T_ * hs, probabilities, T_,
                     T_ * T_, Typed<T>(a.y), hs, T_ * hs, B * NH);
      HeadsToRows(attention_out, Typed<T>(a.y), B, T_, NH, hs, stream);
    }

    LinearResidual(residual2, attention_out, residual, kAttnProjWeight, kAttnProjBias, l, rows, C,
                   C);
    VectorizedLayerNormForward(ln2, a.ln2_mean.get() + l * capacity,
                               a.ln2_rstd.get() + l * capacity, residual2, param<T>(kLn2Weight, l),
                               param<T>(kLn2Bias, l), rows, C, stream);
    LinearGelu(fc_gelu, fc, ln2, kFcWeight, kFcBias, l, rows, C, 4 * C);
    LinearResidual(residual3, fc_gelu, residual2, kFcProjWeight, kFcProjBias, l, rows, 4 * C, C);
    residual = residual3;
  }
  VectorizedLayerNormForward(Typed<T>(a.lnf), a.lnf_mean.get(), a.lnf_rstd.get(), residual,
                             param<T>(kLnfWeight), param<T>(kLnfBias), rows, C, stream);
  // Tied LM head: logits = lnf · token_embeddingᵀ over the padded vocabulary.
  Linear(Typed<T>(a.logits), Typed<T>(a.lnf), kTokenEmbedding, -1, 0, rows, C, Vp);
  CrossEntropyForward(losses.get(), a.logits_lse.get(), Typed<T>(a.logits), targets.get(), rows, V,
                      Vp, stream);
  if (counted_targets > 0) {
    AccumulateSum(loss_accumulator.get(), losses.get(), rows,
                  loss_weight / static_cast<float>(counted_targets), stream);
  }
}

template <typename T>
void DeviceModel::State::RunBackward(float loss_scale,
                                     const std::function<void(size_t)>& group_ready) {
  const int64_t B = batch, T_ = sequence, C = config.channels, L = config.num_layers;
  const int64_t NH = config.num_heads, hs = C / NH, Vp = padded_vocab;
  const int64_t rows = B * T_;
  const int64_t capacity = max_batch * config.max_sequence_length;
  const int64_t attention_capacity =
      max_batch * NH * config.max_sequence_length * config.max_sequence_length;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto ready = [&](size_t group) {
    if (group_ready) group_ready(group);
  };
  // Groups: 0 = ln_f, 1 + (L − 1 − l) = layer l, L + 1 = embeddings.
  const auto layer_group = [&](int64_t l) { return static_cast<size_t>(1 + (L - 1 - l)); };

  const float d_scale =
      counted_targets == 0 ? 0.0f : loss_scale / static_cast<float>(counted_targets);
  CrossEntropyBackward(Typed<T>(a.logits), a.logits_lse.get(), targets.get(), rows,
                       config.vocab_size, Vp, d_scale, stream);
  LinearBackward(Typed<T>(a.d_ln), Typed<T>(a.logits), Typed<T>(a.lnf), kTokenEmbedding, -1, 0,
                 rows, C, Vp);
  T* d_residual = Typed<T>(a.d_residual);
  Check(cudaMemsetAsync(d_residual, 0, static_cast<size_t>(rows * C) * sizeof(T), stream),
        "memset");
  const T* last_residual = Typed<T>(a.residual3, (L - 1) * capacity * C);
  FusedLayerNormBackward(d_residual, grad(kLnfWeight), grad(kLnfBias), Typed<T>(a.d_ln),
                         last_residual, param<T>(kLnfWeight), a.lnf_mean.get(), a.lnf_rstd.get(),
                         rows, C, stream);
  ready(0);

  for (int64_t l = L - 1; l >= 0; --l) {
    const T* residual =
        l == 0 ? Typed<T>(a.embedded) : Typed<T>(a.residual3, (l - 1) * capacity * C);
    const T* ln1 = Typed<T>(a.ln1, l * capacity * C);
    const T* qkv = Typed<T>(a.qkv, l * capacity * 3 * C);
    const T* attention_out = Typed<T>(a.attention_out, l * capacity * C);
    const T* residual2 = Typed<T>(a.residual2, l * capacity * C);
    const T* ln2 = Typed<T>(a.ln2, l * capacity * C);
    T* fc = Typed<T>(a.fc, l * capacity * 4 * C);
    const T* fc_gelu = Typed<T>(a.fc_gelu, l * capacity * 4 * C);

    // MLP branch.
    LinearBackward(Typed<T>(a.d_fc), d_residual, fc_gelu, kFcProjWeight, kFcProjBias, l, rows,
                   4 * C, C, fc, Typed<T>(a.d_fc_gelu));
    LinearBackward(Typed<T>(a.d_ln), Typed<T>(a.d_fc), ln2, kFcWeight, kFcBias, l, rows, C, 4 * C);
    FusedLayerNormBackward(d_residual, grad(kLn2Weight, l), grad(kLn2Bias, l), Typed<T>(a.d_ln),
                           residual2, param<T>(kLn2Weight, l), a.ln2_mean.get() + l * capacity,
                           a.ln2_rstd.get() + l * capacity, rows, C, stream);

    // Attention branch.
    LinearBackward(Typed<T>(a.d_attention_out), d_residual, attention_out, kAttnProjWeight,
                   kAttnProjBias, l, rows, C, C);
    if (fused_attention) {
      const float* lse = a.attention_lse.get() + l * capacity * NH;
      // float32 in one kernel that accumulates dQ with atomics, bf16 in
      // two: on the H200 each is the faster for its dtype (attention.h).
      if constexpr (std::is_same_v<T, float>) {
        FusedAttentionBackwardAccumulatingQueries(Typed<T>(a.d_qkv), a.attention_dots.get(),
                                                  Typed<T>(a.d_attention_out), qkv, attention_out,
                                                  lse, B, T_, NH, stream);
      } else {
        FusedAttentionBackward(Typed<T>(a.d_qkv), a.attention_dots.get(),
                               Typed<T>(a.d_attention_out), qkv, attention_out, lse, B, T_, NH,
                               stream);
      }
    } else {
      const T* probabilities = Typed<T>(a.probabilities, l * attention_capacity);
      T* q = Typed<T>(a.q);
      T* k = Typed<T>(a.k);
      T* v = Typed<T>(a.v);
      T* d_y = Typed<T>(a.d_y);
      T* d_scores = Typed<T>(a.d_scores);
      SplitHeads(q, k, v, qkv, B, T_, NH, hs, stream);  // recomputed rather than kept
      RowsToHeads(d_y, Typed<T>(a.d_attention_out), B, T_, NH, hs, stream);
      // dP = dY·Vᵀ (same shape as S = Q·Kᵀ).
      BatchedGemm<T>(CUBLAS_OP_T, CUBLAS_OP_N, T_, T_, hs, 1.0f, v, hs, T_ * hs, d_y, hs, T_ * hs,
                     d_scores, T_, T_ * T_, B * NH);
      // dV = Pᵀ·dY: column-major dVᵀ (hs × T) = dYᵀ (hs × T) · P (op T of Pᵀ).
      BatchedGemm<T>(CUBLAS_OP_N, CUBLAS_OP_T, hs, T_, T_, 1.0f, d_y, hs, T_ * hs, probabilities,
                     T_, T_ * T_, Typed<T>(a.d_v), hs, T_ * hs, B * NH);
      // dS (with the 1/sqrt(hs) of the forward folded in), in place of dP.
      CausalSoftmaxBackward(d_scores, d_scores, probabilities, B * NH * T_, T_, scale, stream);
      // dQ = dS·K; dK = dSᵀ·Q.
      BatchedGemm<T>(CUBLAS_OP_N, CUBLAS_OP_N, hs, T_, T_, 1.0f, k, hs, T_ * hs, d_scores, T_,
                     T_ * T_, Typed<T>(a.d_q), hs, T_ * hs, B * NH);
      BatchedGemm<T>(CUBLAS_OP_N, CUBLAS_OP_T, hs, T_, T_, 1.0f, q, hs, T_ * hs, d_scores, T_,
                     T_ * T_, Typed<T>(a.d_k), hs, T_ * hs, B * NH);
      JoinHeadsQkv(Typed<T>(a.d_qkv), Typed<T>(a.d_q), Typed<T>(a.d_k), Typed<T>(a.d_v), B, T_, NH,
                   hs, stream);
    }
    LinearBackward(Typed<T>(a.d_ln), Typed<T>(a.d_qkv), ln1, kQkvWeight, kQkvBias, l, rows, C,
                   3 * C);
    FusedLayerNormBackward(d_residual, grad(kLn1Weight, l), grad(kLn1Bias, l), Typed<T>(a.d_ln),
                           residual, param<T>(kLn1Weight, l), a.ln1_mean.get() + l * capacity,
                           a.ln1_rstd.get() + l * capacity, rows, C, stream);
    ready(layer_group(l));
  }
  EmbeddingBackward(grad(kTokenEmbedding), grad(kPositionEmbedding), d_residual, inputs.get(), rows,
                    T_, C, stream);
  ready(static_cast<size_t>(L + 1));
}

DeviceModel::DeviceModel(const ModelConfig& config, DeviceDtype dtype, int64_t max_batch_size,
                         cudaStream_t stream)
    : state_(std::make_unique<State>()) {
  if (std::string problem = ValidateModelConfig(config); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (config.num_layers > 256) throw std::invalid_argument("at most 256 layers");
  State& s = *state_;
  s.config = config;
  s.dtype = dtype;
  s.padded_vocab = (config.vocab_size + 127) / 128 * 128;
  s.max_batch = max_batch_size;
  s.stream = stream;
  Check(cublasCreate(&s.blas), "create handle");
  Check(cublasSetStream(s.blas, stream), "set stream");
  s.fused_matmul = std::make_unique<FusedMatmul>(stream);

  const int64_t C = config.channels, L = config.num_layers, Tm = config.max_sequence_length;
  const int64_t Vp = s.padded_vocab;
  // Per-layer counts of kinds 2..13, and the weight-decay rule of the host
  // model (matrices and embeddings decay; biases and gains do not).
  const auto kind_count = [&](int kind) -> int64_t {
    switch (kind) {
      case kTokenEmbedding:
        return Vp * C;
      case kPositionEmbedding:
        return Tm * C;
      case kQkvWeight:
        return 3 * C * C;
      case kQkvBias:
        return 3 * C;
      case kAttnProjWeight:
        return C * C;
      case kFcWeight:
      case kFcProjWeight:
        return 4 * C * C;
      case kFcBias:
        return 4 * C;
      default:
        return C;
    }
  };
  const auto decays = [](int kind) {
    return kind == kTokenEmbedding || kind == kPositionEmbedding || kind == kQkvWeight ||
           kind == kAttnProjWeight || kind == kFcWeight || kind == kFcProjWeight;
  };
  int64_t offset = 0;
  const auto add_group = [&](const std::string& name, const std::vector<int>& kinds,
                             int64_t layer) {
    GradientGroup group{name, offset, 0};
    for (int kind : kinds) {
      Piece piece{kind, layer, offset, 0, kind_count(kind), s.groups.size(), decays(kind)};
      s.piece_index[kind][layer] = static_cast<int64_t>(s.pieces.size());
      s.pieces.push_back(piece);
      offset += piece.count;
      group.count += piece.count;
    }
    s.groups.push_back(group);
  };
  add_group("ln_f", {kLnfWeight, kLnfBias}, 0);
  std::vector<int> layer_kinds;
  for (int kind = kFirstLayerKind; kind <= kLastLayerKind; ++kind) layer_kinds.push_back(kind);
  for (int64_t l = L - 1; l >= 0; --l) add_group("layer" + std::to_string(l), layer_kinds, l);
  add_group("embeddings", {kTokenEmbedding, kPositionEmbedding}, 0);
  s.num_parameters = offset;
  std::vector<ParameterChunk> chunks;
  for (const Piece& piece : s.pieces) {
    for (int64_t start = 0; start < piece.count; start += kParameterChunkElements) {
      chunks.push_back(
          {piece.device_offset + start, s.groups[piece.group].offset,
           static_cast<int32_t>(std::min(kParameterChunkElements, piece.count - start)),
           static_cast<int32_t>(piece.group), piece.decays ? 1 : 0});
    }
  }
  s.chunks = DeviceArray<ParameterChunk>(static_cast<int64_t>(chunks.size()));
  Check(cudaMemcpy(s.chunks.get(), chunks.data(), chunks.size() * sizeof(ParameterChunk),
                   cudaMemcpyHostToDevice),
        "copy the optimizer's chunks");
  s.device_gradient_storage = DeviceArray<const float*>(static_cast<int64_t>(s.groups.size()));

  s.master = DeviceArray<float>(offset);
  s.first_moment = DeviceArray<float>(offset);
  s.second_moment = DeviceArray<float>(offset);
  s.owned_gradients = DeviceArray<float>(offset);
  Check(cudaMemset(s.master.get(), 0, offset * sizeof(float)), "memset");
  Check(cudaMemset(s.first_moment.get(), 0, offset * sizeof(float)), "memset");
  Check(cudaMemset(s.second_moment.get(), 0, offset * sizeof(float)), "memset");
  Check(cudaMemset(s.owned_gradients.get(), 0, offset * sizeof(float)), "memset");
  if (dtype == DeviceDtype::kBFloat16) s.bf16_parameters = DeviceArray<__nv_bfloat16>(offset);
  for (const GradientGroup& group : s.groups) {
    s.gradient_storage.push_back(s.owned_gradients.get() + group.offset);
  }

  const size_t element = dtype == DeviceDtype::kBFloat16 ? 2 : 4;
  const int64_t NH = config.num_heads;
  const int64_t rows = max_batch_size * Tm;
  const auto bytes = [&](int64_t count) { return DeviceArray<char>(count * element); };
  State::Activations& a = s.a;
  a.embedded = bytes(rows * C);
  a.ln1 = bytes(L * rows * C);
  a.qkv = bytes(L * rows * 3 * C);
  a.attention_out = bytes(L * rows * C);
  a.residual2 = bytes(L * rows * C);
  a.ln2 = bytes(L * rows * C);
  a.fc = bytes(L * rows * 4 * C);
  a.fc_gelu = bytes(L * rows * 4 * C);
  a.residual3 = bytes(L * rows * C);
  a.lnf = bytes(rows * C);
  a.logits = bytes(rows * Vp);
  for (auto* buffer : {&a.projection, &a.d_residual, &a.d_ln, &a.d_attention_out}) {
    *buffer = bytes(rows * C);
  }
  a.d_qkv = bytes(rows * 3 * C);
  a.d_fc = bytes(rows * 4 * C);
  a.d_fc_gelu = bytes(rows * 4 * C);
  s.fused_attention = C / NH == kFusedAttentionHeadSize;
  if (s.fused_attention) {
    a.attention_lse = DeviceArray<float>(L * rows * NH);
    a.attention_dots = DeviceArray<float>(rows * NH);
  } else {
    a.probabilities = bytes(L * max_batch_size * NH * Tm * Tm);
    for (auto* buffer : {&a.q, &a.k, &a.v, &a.y, &a.d_q, &a.d_k, &a.d_v, &a.d_y}) {
      *buffer = bytes(rows * C);
    }
    a.scores = bytes(max_batch_size * NH * Tm * Tm);
    a.d_scores = bytes(max_batch_size * NH * Tm * Tm);
  }
  for (auto* buffer : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
    *buffer = DeviceArray<float>(L * rows);
  }
  a.logits_lse = DeviceArray<float>(rows);
  a.lnf_mean = DeviceArray<float>(rows);
  a.lnf_rstd = DeviceArray<float>(rows);
  s.inputs = DeviceArray<int32_t>(rows);
  s.targets = DeviceArray<int32_t>(rows);
  s.losses = DeviceArray<float>(rows);
  s.loss_accumulator = DeviceArray<float>(1);
  s.sum_of_squares = DeviceArray<float>(1);
  Check(cudaMemset(s.loss_accumulator.get(), 0, sizeof(float)), "memset");
  Check(cudaMemset(s.sum_of_squares.get(), 0, sizeof(float)), "memset");
  // cudaMemset runs on the legacy default stream, which does not order
  // itself with our non-blocking `stream`: finish it before any work there.
  Check(cudaDeviceSynchronize(), "synchronize");
}

DeviceModel::~DeviceModel() {
  if (state_ && state_->blas != nullptr) cublasDestroy(state_->blas);
}

const ModelConfig& DeviceModel::config() const { return state_->config; }
int64_t DeviceModel::padded_vocab_size() const { return state_->padded_vocab; }
int64_t DeviceModel::num_parameters() const { return state_->num_parameters; }
const std::vector<GradientGroup>& DeviceModel::gradient_groups() const { return state_->groups; }
cudaStream_t DeviceModel::stream() const { return state_->stream; }

namespace {

// Host offset of (kind, layer) in the host model's flat buffer.
int64_t HostOffset(const Model& host, int kind, int64_t layer) {
  const ParameterTensor& tensor = host.tensors()[static_cast<size_t>(kind)];
  const bool in_layers = kind >= kFirstLayerKind && kind <= kLastLayerKind;
  return tensor.offset + (in_layers ? layer * (tensor.count / host.config().num_layers) : 0);
}

// Elements of (kind, layer) that both layouts have (the host vocabulary is
// not padded).
int64_t SharedCount(const Model& host, const Piece& piece) {
  if (piece.kind == kTokenEmbedding) return host.config().vocab_size * host.config().channels;
  return piece.count;
}

void CheckSameConfig(const ModelConfig& a, const ModelConfig& b) {
  if (a.vocab_size != b.vocab_size || a.max_sequence_length != b.max_sequence_length ||
      a.num_layers != b.num_layers || a.num_heads != b.num_heads || a.channels != b.channels) {
    throw std::logic_error("DeviceModel: the host model has another configuration");
  }
}

}  // namespace

namespace {

// One device array of this model's parameter layout from the host model's
// layout (the padded vocabulary rows start at zero), or back.
// `layout`: the device model's pieces, parameter count and stream.
struct DeviceLayout {
  const std::vector<Piece>& pieces;
  int64_t num_parameters;
  cudaStream_t stream;
};

void CopyInFromHostLayout(const DeviceLayout& s, const Model& host, std::span<const float> source,
                          float* device_array) {
  std::vector<float> staged(static_cast<size_t>(s.num_parameters), 0.0f);
  for (const Piece& piece : s.pieces) {
    const int64_t from = HostOffset(host, piece.kind, piece.layer);
    std::copy(source.begin() + from, source.begin() + from + SharedCount(host, piece),
              staged.begin() + piece.device_offset);
  }
  Check(cudaMemcpyAsync(device_array, staged.data(), staged.size() * sizeof(float),
                        cudaMemcpyHostToDevice, s.stream),
        "copy to the device");
  Check(cudaStreamSynchronize(s.stream), "synchronize");  // `staged` goes out of scope
}

void CopyOutToHostLayout(const DeviceLayout& s, const Model& host, const float* device_array,
                         std::span<float> destination) {
  std::vector<float> staged(static_cast<size_t>(s.num_parameters));
  Check(cudaMemcpyAsync(staged.data(), device_array, staged.size() * sizeof(float),
                        cudaMemcpyDeviceToHost, s.stream),
        "copy from the device");
  Check(cudaStreamSynchronize(s.stream), "synchronize");
  for (const Piece& piece : s.pieces) {
    const int64_t to = HostOffset(host, piece.kind, piece.layer);
    std::copy(staged.begin() + piece.device_offset,
              staged.begin() + piece.device_offset + SharedCount(host, piece),
              destination.begin() + to);
  }
}

void CheckHostSize(const Model& host, size_t size, const char* what) {
  if (size != static_cast<size_t>(host.num_parameters())) {
    throw std::logic_error(std::string("DeviceModel: ") + what + " has " + std::to_string(size) +
                           " values for a model of " + std::to_string(host.num_parameters()));
  }
}

}  // namespace

void DeviceModel::LoadWeights(const Model& host) {
  State& s = *state_;
  CheckSameConfig(s.config, host.config());
  CopyInFromHostLayout({s.pieces, s.num_parameters, s.stream}, host, host.parameters(),
                       s.master.get());
  if (s.dtype == DeviceDtype::kBFloat16) {
    CopyMasterToParameters(s.bf16_parameters.get(), s.master.get(), s.num_parameters, s.stream);
  }
  Check(cudaStreamSynchronize(s.stream), "synchronize");
}

void DeviceModel::StoreWeights(Model& host) const {
  const State& s = *state_;
  CheckSameConfig(s.config, host.config());
  CopyOutToHostLayout({s.pieces, s.num_parameters, s.stream}, host, s.master.get(),
                      host.parameters());
}

void DeviceModel::StoreMoments(const Model& layout, std::span<float> first_moment,
                               std::span<float> second_moment) const {
  const State& s = *state_;
  CheckSameConfig(s.config, layout.config());
  CheckHostSize(layout, first_moment.size(), "the first moment");
  CheckHostSize(layout, second_moment.size(), "the second moment");
  const DeviceLayout device{s.pieces, s.num_parameters, s.stream};
  CopyOutToHostLayout(device, layout, s.first_moment.get(), first_moment);
  CopyOutToHostLayout(device, layout, s.second_moment.get(), second_moment);
}

void DeviceModel::LoadMoments(const Model& layout, std::span<const float> first_moment,
                              std::span<const float> second_moment) {
  State& s = *state_;
  CheckSameConfig(s.config, layout.config());
  CheckHostSize(layout, first_moment.size(), "the first moment");
  CheckHostSize(layout, second_moment.size(), "the second moment");
  const DeviceLayout device{s.pieces, s.num_parameters, s.stream};
  CopyInFromHostLayout(device, layout, first_moment, s.first_moment.get());
  CopyInFromHostLayout(device, layout, second_moment, s.second_moment.get());
}

void DeviceModel::SetGradientStorage(size_t group, float* data) {
  state_->gradient_storage.at(group) = data;
  state_->device_gradient_storage_stale = true;
}

void DeviceModel::UseOwnGradientStorage() {
  State& s = *state_;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    s.gradient_storage[g] = s.owned_gradients.get() + s.groups[g].offset;
  }
  s.device_gradient_storage_stale = true;
}

float* DeviceModel::gradient_storage(size_t group) const {
  return state_->gradient_storage.at(group);
}

void DeviceModel::ZeroGradients() {
  State& s = *state_;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    Check(cudaMemsetAsync(s.gradient_storage[g], 0,
                          static_cast<size_t>(s.groups[g].count) * sizeof(float), s.stream),
          "zero gradients");
  }
}

void DeviceModel::Forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                          int64_t batch_size, int64_t sequence_length, float loss_weight) {
  State& s = *state_;
  const int64_t rows = batch_size * sequence_length;
  if (batch_size < 1 || batch_size > s.max_batch || sequence_length < 1 ||
      sequence_length > s.config.max_sequence_length) {
    throw std::invalid_argument("DeviceModel::Forward: batch " + std::to_string(batch_size) +
                                " × sequence " + std::to_string(sequence_length) +
                                " exceeds the model's " + std::to_string(s.max_batch) + " × " +
                                std::to_string(s.config.max_sequence_length));
  }
  if (static_cast<int64_t>(inputs.size()) != rows || static_cast<int64_t>(targets.size()) != rows) {
    throw std::invalid_argument("DeviceModel::Forward: inputs and targets must hold " +
                                std::to_string(rows) + " tokens");
  }
  s.counted_targets = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (inputs[i] < 0 || inputs[i] >= s.config.vocab_size || targets[i] >= s.config.vocab_size) {
      throw std::invalid_argument("Forward: token " + std::to_string(inputs[i]) + " or target " +
                                  std::to_string(targets[i]) + " at position " + std::to_string(i) +
                                  " outside the vocabulary of " +
                                  std::to_string(s.config.vocab_size));
    }
    if (targets[i] >= 0) ++s.counted_targets;
  }
  s.batch = batch_size;
  s.sequence = sequence_length;
  // From pageable memory: the copy has taken the bytes when the call returns.
  Check(cudaMemcpyAsync(s.inputs.get(), inputs.data(), inputs.size_bytes(), cudaMemcpyHostToDevice,
                        s.stream),
        "copy inputs");
  Check(cudaMemcpyAsync(s.targets.get(), targets.data(), targets.size_bytes(),
                        cudaMemcpyHostToDevice, s.stream),
        "copy targets");
  if (s.dtype == DeviceDtype::kBFloat16) {
    s.RunForward<__nv_bfloat16>(loss_weight);
  } else {
    s.RunForward<float>(loss_weight);
  }
  Check(cudaGetLastError(), "forward");
}

void DeviceModel::Backward(float loss_scale, const std::function<void(size_t)>& group_ready) {
  State& s = *state_;
  if (s.batch == 0) throw std::logic_error("Backward called before Forward");
  if (s.dtype == DeviceDtype::kBFloat16) {
    s.RunBackward<__nv_bfloat16>(loss_scale, group_ready);
  } else {
    s.RunBackward<float>(loss_scale, group_ready);
  }
  Check(cudaGetLastError(), "backward");
}

void DeviceModel::Step(const AdamWOptions& options, int64_t step_number, float gradient_scale,
                       float max_norm) {
  State& s = *state_;
  if (s.device_gradient_storage_stale) {
    // From pageable memory: the bytes are taken when the call returns.
    Check(cudaMemcpyAsync(s.device_gradient_storage.get(), s.gradient_storage.data(),
                          s.gradient_storage.size() * sizeof(float*), cudaMemcpyHostToDevice,
                          s.stream),
          "copy the gradient pointers");
    s.device_gradient_storage_stale = false;
  }
  const int64_t num_chunks = s.chunks.count();
  Check(cudaMemsetAsync(s.sum_of_squares.get(), 0, sizeof(float), s.stream), "memset");
  ChunkedSumOfSquares(s.sum_of_squares.get(), s.chunks.get(), num_chunks,
                      s.device_gradient_storage.get(), s.stream);
  AdamWStep step{};
  step.learning_rate = options.learning_rate;
  step.beta1 = options.beta1;
  step.beta2 = options.beta2;
  step.epsilon = options.epsilon;
  step.weight_decay = options.weight_decay;
  step.first_correction = 1.0f - std::pow(options.beta1, static_cast<float>(step_number));
  step.second_correction = 1.0f - std::pow(options.beta2, static_cast<float>(step_number));
  step.gradient_scale = gradient_scale;
  step.max_norm = max_norm;
  s.last_gradient_scale = gradient_scale;
  if (s.dtype == DeviceDtype::kBFloat16) {
    ChunkedAdamWUpdate(s.master.get(), s.bf16_parameters.get(), s.first_moment.get(),
                       s.second_moment.get(), s.chunks.get(), num_chunks,
                       s.device_gradient_storage.get(), step, s.sum_of_squares.get(), s.stream);
  } else {
    ChunkedAdamWUpdate<float>(s.master.get(), nullptr, s.first_moment.get(), s.second_moment.get(),
                              s.chunks.get(), num_chunks, s.device_gradient_storage.get(), step,
                              s.sum_of_squares.get(), s.stream);
  }
  Check(cudaGetLastError(), "optimizer step");
}

float DeviceModel::ReadLoss() {
  State& s = *state_;
  float loss = 0.0f;
  Check(cudaMemcpyAsync(&loss, s.loss_accumulator.get(), sizeof(float), cudaMemcpyDeviceToHost,
                        s.stream),
        "read loss");
  Check(cudaMemsetAsync(s.loss_accumulator.get(), 0, sizeof(float), s.stream), "memset");
  Check(cudaStreamSynchronize(s.stream), "synchronize");
  return loss;
}

float DeviceModel::ReadGradientNorm() {
  State& s = *state_;
  float sum_of_squares = 0.0f;
  Check(cudaMemcpyAsync(&sum_of_squares, s.sum_of_squares.get(), sizeof(float),
                        cudaMemcpyDeviceToHost, s.stream),
        "read gradient norm");
  Check(cudaStreamSynchronize(s.stream), "synchronize");
  return s.last_gradient_scale * std::sqrt(sum_of_squares);
}

}  // namespace infini::examples::gpt2::gpu
