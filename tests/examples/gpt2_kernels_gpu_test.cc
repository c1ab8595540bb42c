// gpt2's fused CUDA kernels against the unfused ones they replace (label
// "gpu", run by scripts/gpu_check.sh), on random inputs. The reference is
// the unfused path in float32 on the same bf16-rounded inputs; a fused
// kernel passes when its largest error is at most twice the unfused bf16
// path's, plus 0.1 % of the reference's largest magnitude (what bf16
// storage of the result alone can cost). Every comparison prints one line:
//   <what> <shape>: max abs err <fused> (unfused bf16 <unfused>), rel <r>,
//   bound <b>: PASS|FAIL
// where rel = max abs err / max |reference|. The d12 shape also prints the
// time of the fused and the unfused attention (figures, not checked).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention.h"
#include "fused_matmul.h"
#include "kernels.h"

namespace {

namespace gpu = infini::examples::gpt2::gpu;
using bf16 = __nv_bfloat16;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call
#define BLAS_OK(call) ASSERT_EQ((call), CUBLAS_STATUS_SUCCESS) << #call

bool HasGpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// Device memory of `count` elements of E.
template <typename E>
struct Buffer {
  explicit Buffer(size_t elements) : count(elements) {
    if (cudaMalloc(&data, elements * sizeof(E)) != cudaSuccess) data = nullptr;
  }
  ~Buffer() { cudaFree(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  E* data = nullptr;
  size_t count;
};

template <typename E>
E FromFloat(float x) {
  if constexpr (std::is_same_v<E, float>) {
    return x;
  } else {
    return __float2bfloat16(x);
  }
}
template <typename E>
float ToFloat(E x) {
  if constexpr (std::is_same_v<E, float>) {
    return x;
  } else {
    return __bfloat162float(x);
  }
}

template <typename E>
void Upload(Buffer<E>& to, const std::vector<float>& from) {
  std::vector<E> staged(from.size());
  for (size_t i = 0; i < from.size(); ++i) staged[i] = FromFloat<E>(from[i]);
  ASSERT_EQ(cudaMemcpy(to.data, staged.data(), staged.size() * sizeof(E), cudaMemcpyHostToDevice),
            cudaSuccess);
}
template <typename E>
std::vector<float> Download(const Buffer<E>& from) {
  std::vector<E> staged(from.count);
  EXPECT_EQ(cudaMemcpy(staged.data(), from.data, staged.size() * sizeof(E), cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<float> values(staged.size());
  for (size_t i = 0; i < staged.size(); ++i) values[i] = ToFloat(staged[i]);
  return values;
}

// Values uniform in [−range, range], rounded to bf16 so that every path
// sees the same inputs.
std::vector<float> RandomValues(size_t count, float range, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-range, range);
  std::vector<float> values(count);
  for (float& value : values) value = __bfloat162float(__float2bfloat16(uniform(generator)));
  return values;
}

float MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// Prints the line of the header comment; true on PASS.
bool Compare(const std::string& what, const std::vector<float>& fused,
             const std::vector<float>& unfused_bf16, const std::vector<float>& reference) {
  float magnitude = 0.0f;
  for (float value : reference) magnitude = std::max(magnitude, std::fabs(value));
  const float fused_error = MaxAbsDifference(fused, reference);
  const float unfused_error = MaxAbsDifference(unfused_bf16, reference);
  const float bound = 2.0f * unfused_error + 1e-3f * magnitude;
  const bool pass = std::isfinite(fused_error) && fused_error <= bound;
  std::printf("%s: max abs err %.3g (unfused bf16 %.3g), rel %.3g, bound %.3g: %s\n", what.c_str(),
              fused_error, unfused_error, magnitude > 0 ? fused_error / magnitude : 0.0f, bound,
              pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass;
}

struct Shape {
  int64_t batch, heads, sequence;
  int64_t head_size = gpu::kFusedAttentionHeadSize;
  int64_t channels() const { return heads * head_size; }
  int64_t rows() const { return batch * sequence; }
  std::string Name() const {
    return "B=" + std::to_string(batch) + " NH=" + std::to_string(heads) +
           " T=" + std::to_string(sequence) + " HD=" + std::to_string(head_size);
  }
};

template <typename E>
constexpr cudaDataType_t kCudaType = std::is_same_v<E, float> ? CUDA_R_32F : CUDA_R_16BF;

// The unfused attention of device_model.cu, forward and backward.
template <typename E>
class UnfusedAttention {
 public:
  explicit UnfusedAttention(const Shape& shape)
      : s_(shape),
        q_(Count()),
        k_(Count()),
        v_(Count()),
        y_(Count()),
        d_y_(Count()),
        d_q_(Count()),
        d_k_(Count()),
        d_v_(Count()),
        scores_(Squares()),
        probabilities_(Squares()) {
    cublasCreate(&blas_);
  }
  ~UnfusedAttention() { cublasDestroy(blas_); }

  void Forward(E* out, const E* qkv) {
    const int64_t T = s_.sequence, hs = s_.head_size, BH = s_.batch * s_.heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    gpu::SplitHeads(q_.data, k_.data, v_.data, qkv, s_.batch, T, s_.heads, hs, nullptr);
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k_.data, hs, T * hs, q_.data, hs, T * hs,
         scores_.data, T, T * T, BH);
    gpu::CausalSoftmaxForward(probabilities_.data, scores_.data, BH * T, T, nullptr);
    Gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v_.data, hs, T * hs, probabilities_.data, T,
         T * T, y_.data, hs, T * hs, BH);
    gpu::HeadsToRows(out, y_.data, s_.batch, T, s_.heads, hs, nullptr);
  }

  // After Forward on the same qkv.
  void Backward(E* d_qkv, const E* d_out) {
    const int64_t T = s_.sequence, hs = s_.head_size, BH = s_.batch * s_.heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    E* d_scores = scores_.data;
    gpu::RowsToHeads(d_y_.data, d_out, s_.batch, T, s_.heads, hs, nullptr);
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v_.data, hs, T * hs, d_y_.data, hs, T * hs,
         d_scores, T, T * T, BH);
    Gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, d_y_.data, hs, T * hs, probabilities_.data, T,
         T * T, d_v_.data, hs, T * hs, BH);
    gpu::CausalSoftmaxBackward(d_scores, d_scores, probabilities_.data, BH * T, T, scale, nullptr);
    Gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k_.data, hs, T * hs, d_scores, T, T * T,
         d_q_.data, hs, T * hs, BH);
    Gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q_.data, hs, T * hs, d_scores, T, T * T,
         d_k_.data, hs, T * hs, BH);
    gpu::JoinHeadsQkv(d_qkv, d_q_.data, d_k_.data, d_v_.data, s_.batch, T, s_.heads, hs, nullptr);
  }

 private:
  size_t Count() const { return static_cast<size_t>(s_.rows() * s_.channels()); }
  size_t Squares() const {
    return static_cast<size_t>(s_.batch * s_.heads * s_.sequence * s_.sequence);
  }
  void Gemm(cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
            float alpha, const E* a, int64_t lda, int64_t stride_a, const E* b, int64_t ldb,
            int64_t stride_b, E* c, int64_t ldc, int64_t stride_c, int64_t batch_count) {
    const float zero = 0.0f;
    const cublasStatus_t status = cublasGemmStridedBatchedEx(
        blas_, transa, transb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
        &alpha, a, kCudaType<E>, static_cast<int>(lda), stride_a, b, kCudaType<E>,
        static_cast<int>(ldb), stride_b, &zero, c, kCudaType<E>, static_cast<int>(ldc), stride_c,
        static_cast<int>(batch_count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
  }

  Shape s_;
  cublasHandle_t blas_ = nullptr;
  Buffer<E> q_, k_, v_, y_, d_y_, d_q_, d_k_, d_v_, scores_, probabilities_;
};

struct AttentionResult {
  std::vector<float> out, d_qkv;
};

template <typename E>
AttentionResult RunUnfused(const Shape& s, const std::vector<float>& qkv,
                           const std::vector<float>& d_out) {
  Buffer<E> qkv_device(qkv.size()), d_out_device(d_out.size()),
      out(static_cast<size_t>(s.rows() * s.channels())), d_qkv(qkv.size());
  Upload(qkv_device, qkv);
  Upload(d_out_device, d_out);
  UnfusedAttention<E> attention(s);
  attention.Forward(out.data, qkv_device.data);
  attention.Backward(d_qkv.data, d_out_device.data);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {Download(out), Download(d_qkv)};
}

// The bf16 attention of the first version (wmma through shared memory).
AttentionResult RunWmma(const Shape& s, const std::vector<float>& qkv,
                        const std::vector<float>& d_out) {
  const size_t rows_heads = static_cast<size_t>(s.rows() * s.heads);
  Buffer<bf16> qkv_device(qkv.size()), d_out_device(d_out.size()),
      out(static_cast<size_t>(s.rows() * s.channels())), d_qkv(qkv.size());
  Buffer<float> logsumexp(rows_heads), scratch(rows_heads);
  Upload(qkv_device, qkv);
  Upload(d_out_device, d_out);
  gpu::FusedAttentionForwardWmma(out.data, logsumexp.data, qkv_device.data, s.batch, s.sequence,
                                 s.heads, nullptr);
  gpu::FusedAttentionBackwardWmma(d_qkv.data, scratch.data, d_out_device.data, qkv_device.data,
                                  out.data, logsumexp.data, s.batch, s.sequence, s.heads, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {Download(out), Download(d_qkv)};
}

// The float32 forward, then the one-kernel backward that accumulates dQ
// (what the model runs in float32).
AttentionResult RunAccumulatingQueries(const Shape& s, const std::vector<float>& qkv,
                                       const std::vector<float>& d_out) {
  const size_t rows_heads = static_cast<size_t>(s.rows() * s.heads);
  Buffer<float> qkv_device(qkv.size()), d_out_device(d_out.size()),
      out(static_cast<size_t>(s.rows() * s.channels())), d_qkv(qkv.size());
  Buffer<float> logsumexp(rows_heads), scratch(rows_heads);
  Upload(qkv_device, qkv);
  Upload(d_out_device, d_out);
  gpu::FusedAttentionForward(out.data, logsumexp.data, qkv_device.data, s.batch, s.sequence,
                             s.heads, nullptr);
  gpu::FusedAttentionBackwardAccumulatingQueries(d_qkv.data, scratch.data, d_out_device.data,
                                                 qkv_device.data, out.data, logsumexp.data, s.batch,
                                                 s.sequence, s.heads, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {Download(out), Download(d_qkv)};
}

template <typename E>
AttentionResult RunFused(const Shape& s, const std::vector<float>& qkv,
                         const std::vector<float>& d_out) {
  const size_t rows_heads = static_cast<size_t>(s.rows() * s.heads);
  Buffer<E> qkv_device(qkv.size()), d_out_device(d_out.size()),
      out(static_cast<size_t>(s.rows() * s.channels())), d_qkv(qkv.size());
  Buffer<float> logsumexp(rows_heads), scratch(rows_heads);
  Upload(qkv_device, qkv);
  Upload(d_out_device, d_out);
  gpu::FusedAttentionForward(out.data, logsumexp.data, qkv_device.data, s.batch, s.sequence,
                             s.heads, nullptr);
  gpu::FusedAttentionBackward(d_qkv.data, scratch.data, d_out_device.data, qkv_device.data,
                              out.data, logsumexp.data, s.batch, s.sequence, s.heads, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return {Download(out), Download(d_qkv)};
}

// One of q, k, v (part 0, 1, 2) of a [rows, 3, C] buffer.
std::vector<float> Part(const std::vector<float>& qkv, const Shape& s, int part) {
  const int64_t C = s.channels();
  std::vector<float> values;
  values.reserve(static_cast<size_t>(s.rows() * C));
  for (int64_t row = 0; row < s.rows(); ++row) {
    const auto begin = qkv.begin() + row * 3 * C + part * C;
    values.insert(values.end(), begin, begin + C);
  }
  return values;
}

void ExpectFusedAttentionMatches(const Shape& s) {
  const std::vector<float> qkv = RandomValues(static_cast<size_t>(s.rows() * 3 * s.channels()),
                                              2.0f, 1 + static_cast<uint32_t>(s.sequence));
  const std::vector<float> d_out = RandomValues(static_cast<size_t>(s.rows() * s.channels()), 1.0f,
                                                2 + static_cast<uint32_t>(s.sequence));
  const AttentionResult reference = RunUnfused<float>(s, qkv, d_out);
  const AttentionResult unfused = RunUnfused<bf16>(s, qkv, d_out);
  const AttentionResult fused = RunFused<bf16>(s, qkv, d_out);
  const AttentionResult fused_float = RunFused<float>(s, qkv, d_out);
  const AttentionResult wmma = RunWmma(s, qkv, d_out);
  const AttentionResult accumulating = RunAccumulatingQueries(s, qkv, d_out);
  const char* names[] = {"dQ", "dK", "dV"};
  // bf16 on mma.sync (what the model runs), bf16 on wmma (the first
  // version), float32 with two backward kernels, and with the one that
  // accumulates dQ (what the model runs in float32); float32 against the
  // unfused float32 itself (only its rounding may differ).
  const AttentionResult* results[] = {&fused, &wmma, &fused_float, &accumulating};
  const char* labels[] = {" bf16 ", " bf16 (wmma version) ", " fp32 (two-kernel backward) ",
                          " fp32 "};
  for (const int variant : {0, 1, 2, 3}) {
    const bool in_float = variant >= 2;
    const AttentionResult& result = *results[variant];
    const AttentionResult& baseline = in_float ? reference : unfused;
    const std::string shape = labels[variant] + s.Name();
    EXPECT_TRUE(
        Compare("fused attention forward out" + shape, result.out, baseline.out, reference.out));
    for (int part = 0; part < 3; ++part) {
      EXPECT_TRUE(Compare(std::string("fused attention backward ") + names[part] + shape,
                          Part(result.d_qkv, s, part), Part(baseline.d_qkv, s, part),
                          Part(reference.d_qkv, s, part)))
          << names[part];
    }
  }
}

TEST(Gpt2Kernels, FusedAttentionMatchesTheUnfusedPathAtT256) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  ExpectFusedAttentionMatches({2, 4, 256});
}

TEST(Gpt2Kernels, FusedAttentionMatchesTheUnfusedPathAtT1024) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  ExpectFusedAttentionMatches({2, 4, 1024});
}

// A sequence that is not a multiple of the 64-row tiles: the partial tile's
// rows past T must neither be written nor leak into the gradients.
TEST(Gpt2Kernels, FusedAttentionMatchesTheUnfusedPathOnAPartialTile) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  ExpectFusedAttentionMatches({3, 2, 100});
}

// The losses and d_logits of the unfused cross-entropy
// (SoftmaxCrossEntropy*) or the fused one (CrossEntropy*).
template <typename E>
std::pair<std::vector<float>, std::vector<float>> RunCrossEntropy(
    bool fused, const std::vector<float>& logits, const std::vector<int32_t>& targets,
    int64_t vocab, int64_t padded_vocab, float scale) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  Buffer<E> logits_device(logits.size());
  Buffer<float> losses(targets.size()), logsumexp(targets.size());
  Buffer<int32_t> targets_device(targets.size());
  Upload(logits_device, logits);
  EXPECT_EQ(cudaMemcpy(targets_device.data, targets.data(), targets.size() * sizeof(int32_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  if (fused) {
    gpu::CrossEntropyForward(losses.data, logsumexp.data, logits_device.data, targets_device.data,
                             rows, vocab, padded_vocab, nullptr);
    gpu::CrossEntropyBackward(logits_device.data, logsumexp.data, targets_device.data, rows, vocab,
                              padded_vocab, scale, nullptr);
  } else {
    gpu::SoftmaxCrossEntropyForward(logits_device.data, losses.data, targets_device.data, rows,
                                    vocab, padded_vocab, nullptr);
    gpu::SoftmaxCrossEntropyBackward(logits_device.data, targets_device.data, rows, padded_vocab,
                                     scale, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {Download(losses), Download(logits_device)};
}

// GPT-2's vocabulary padded to 50304, 64 rows, every fourth target −1 (not
// counted: its loss and gradient are 0).
TEST(Gpt2Kernels, FusedCrossEntropyMatchesTheUnfusedOne) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  constexpr int64_t kRows = 64, kVocab = 50257, kPadded = 50304;
  constexpr float kScale = 1.0f / 48;
  std::vector<float> logits = RandomValues(static_cast<size_t>(kRows * kPadded), 4.0f, 7);
  std::vector<int32_t> targets(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    targets[r] = r % 4 == 3 ? -1 : static_cast<int32_t>((r * 7919) % kVocab);
  }
  const auto reference = RunCrossEntropy<float>(false, logits, targets, kVocab, kPadded, kScale);
  const auto unfused = RunCrossEntropy<bf16>(false, logits, targets, kVocab, kPadded, kScale);
  const auto fused = RunCrossEntropy<bf16>(true, logits, targets, kVocab, kPadded, kScale);
  const auto fused_float = RunCrossEntropy<float>(true, logits, targets, kVocab, kPadded, kScale);
  EXPECT_TRUE(Compare("fused cross-entropy loss bf16 rows=64 V=50257", fused.first, unfused.first,
                      reference.first));
  EXPECT_TRUE(Compare("fused cross-entropy d_logits bf16 rows=64 V=50257", fused.second,
                      unfused.second, reference.second));
  // In float the two must agree to float rounding.
  EXPECT_TRUE(Compare("fused cross-entropy loss fp32 rows=64 V=50257", fused_float.first,
                      reference.first, reference.first));
  EXPECT_TRUE(Compare("fused cross-entropy d_logits fp32 rows=64 V=50257", fused_float.second,
                      reference.second, reference.second));
}

// d (and, for kGeluBias, the GELU input) of the unfused path: cuBLAS, then
// AddBias / GeluForward / GeluBackward; or of FusedMatmul (nullopt where it
// has no algorithm).
struct Product {
  std::vector<float> d, aux;
};
struct ProductCase {
  gpu::Epilogue epilogue;
  bool a_transposed;
  int64_t m, n, k;
  bool residual = false;  // kBias only: + a residual (the projections' add)
  std::string Name() const {
    const char* names[] = {"bias", "gelu+bias", "gelu gradient"};
    return std::string("matmul epilogue ") + names[static_cast<int>(epilogue)] +
           (residual ? "+residual" : "") + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
           " k=" + std::to_string(k);
  }
};

template <typename E>
std::optional<Product> RunProduct(bool fused, const ProductCase& c, const std::vector<float>& a,
                                  const std::vector<float>& b, const std::vector<float>& bias,
                                  const std::vector<float>& gelu_in) {
  // The GELU input doubles as the residual.
  Buffer<E> residual(static_cast<size_t>(c.m * c.n));
  Upload(residual, gelu_in);
  Buffer<E> a_device(a.size()), b_device(b.size()), bias_device(bias.size()),
      d(static_cast<size_t>(c.m * c.n)), aux(static_cast<size_t>(c.m * c.n)),
      product(static_cast<size_t>(c.m * c.n));
  Upload(a_device, a);
  Upload(b_device, b);
  Upload(bias_device, bias);
  if (c.epilogue == gpu::Epilogue::kGeluGradient) Upload(aux, gelu_in);
  if (fused) {
    gpu::FusedMatmul matmul(nullptr);
    if (!matmul.Run<E>(c.epilogue, c.a_transposed, c.m, c.n, c.k, a_device.data, b_device.data,
                       d.data, bias_device.data, aux.data, c.residual ? residual.data : nullptr)) {
      return std::nullopt;
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Product{Download(d), Download(aux)};
  }
  cublasHandle_t blas = nullptr;
  EXPECT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  E* out = c.epilogue == gpu::Epilogue::kBias       ? d.data
           : c.epilogue == gpu::Epilogue::kGeluBias ? aux.data
                                                    : product.data;
  EXPECT_EQ(
      cublasGemmEx(blas, c.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                   static_cast<int>(c.m), static_cast<int>(c.n), static_cast<int>(c.k), &one,
                   a_device.data, kCudaType<E>, static_cast<int>(c.a_transposed ? c.k : c.m),
                   b_device.data, kCudaType<E>, static_cast<int>(c.k), &zero, out, kCudaType<E>,
                   static_cast<int>(c.m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  if (c.epilogue != gpu::Epilogue::kGeluGradient) {
    gpu::AddBias(out, bias_device.data, c.n, c.m, nullptr);
  }
  if (c.residual) gpu::Add(d.data, residual.data, d.data, c.m * c.n, nullptr);
  if (c.epilogue == gpu::Epilogue::kGeluBias)
    gpu::GeluForward(d.data, aux.data, c.m * c.n, nullptr);
  if (c.epilogue == gpu::Epilogue::kGeluGradient) {
    gpu::GeluBackward(d.data, aux.data, product.data, c.m * c.n, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cublasDestroy(blas);
  return Product{Download(d), Download(aux)};
}

void ExpectFusedProductMatches(const ProductCase& c, bool also_float) {
  const std::vector<float> a = RandomValues(static_cast<size_t>(c.m * c.k), 0.1f, 11);
  const std::vector<float> b = RandomValues(static_cast<size_t>(c.k * c.n), 1.0f, 12);
  const std::vector<float> bias = RandomValues(static_cast<size_t>(c.m), 1.0f, 13);
  const std::vector<float> gelu_in = RandomValues(static_cast<size_t>(c.m * c.n), 3.0f, 14);
  const std::optional<Product> reference = RunProduct<float>(false, c, a, b, bias, gelu_in);
  const std::optional<Product> unfused = RunProduct<bf16>(false, c, a, b, bias, gelu_in);
  const std::optional<Product> fused = RunProduct<bf16>(true, c, a, b, bias, gelu_in);
  ASSERT_TRUE(reference && unfused);
  if (!fused) {
    std::printf("%s bf16: cuBLASLt has no algorithm here, the unfused path runs: SKIP\n",
                c.Name().c_str());
    return;
  }
  EXPECT_TRUE(Compare(c.Name() + " bf16", fused->d, unfused->d, reference->d));
  if (c.epilogue == gpu::Epilogue::kGeluBias) {
    EXPECT_TRUE(Compare(c.Name() + " bf16 (GELU input)", fused->aux, unfused->aux, reference->aux));
  }
  if (!also_float) return;
  const std::optional<Product> fused_float = RunProduct<float>(true, c, a, b, bias, gelu_in);
  if (!fused_float) {
    std::printf("%s fp32: cuBLASLt has no algorithm here, the unfused path runs: SKIP\n",
                c.Name().c_str());
    return;
  }
  EXPECT_TRUE(Compare(c.Name() + " fp32", fused_float->d, reference->d, reference->d));
}

// The d12 shapes over 512 rows: the qkv layer (bias), the MLP's projection
// with the residual add, the MLP's first layer (bias and GELU) and the
// MLP's input gradient (GELU gradient). float32 runs only the bias
// epilogue (with and without the residual); its GELU lines say how far
// cuBLASLt's GELU is from GeluForward's formula, which float32 keeps (its
// tests compare with the host path at 1e-3).
TEST(Gpt2Kernels, MatmulEpiloguesMatchTheUnfusedPasses) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  ExpectFusedProductMatches({gpu::Epilogue::kBias, true, 2304, 512, 768}, true);
  ExpectFusedProductMatches({gpu::Epilogue::kBias, true, 768, 512, 3072, true}, true);
  ExpectFusedProductMatches({gpu::Epilogue::kGeluBias, true, 3072, 512, 768}, true);
  ExpectFusedProductMatches({gpu::Epilogue::kGeluGradient, false, 3072, 512, 768}, true);
}

// d_in (accumulated onto a random start), d_weight and d_bias of the
// layernorm backward: LayerNormBackward (two kernels) or the fused one.
template <typename E>
std::vector<std::vector<float>> RunLayerNormBackward(bool fused, int64_t rows, int64_t channels) {
  const size_t count = static_cast<size_t>(rows * channels);
  Buffer<E> x(count), d_out(count), d_in(count), out(count), weight(channels), bias(channels);
  Buffer<float> mean(rows), rstd(rows), d_weight(channels), d_bias(channels);
  Upload(x, RandomValues(count, 2.0f, 31));
  Upload(d_out, RandomValues(count, 1.0f, 32));
  Upload(d_in, RandomValues(count, 1.0f, 33));
  Upload(weight, RandomValues(channels, 1.0f, 34));
  Upload(bias, RandomValues(channels, 1.0f, 35));
  Upload(d_weight, RandomValues(channels, 1.0f, 36));
  Upload(d_bias, RandomValues(channels, 1.0f, 37));
  gpu::LayerNormForward(out.data, mean.data, rstd.data, x.data, weight.data, bias.data, rows,
                        channels, nullptr);
  if (fused) {
    gpu::FusedLayerNormBackward(d_in.data, d_weight.data, d_bias.data, d_out.data, x.data,
                                weight.data, mean.data, rstd.data, rows, channels, nullptr);
  } else {
    gpu::LayerNormBackward(d_in.data, d_weight.data, d_bias.data, d_out.data, x.data, weight.data,
                           mean.data, rstd.data, rows, channels, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {Download(d_in), Download(d_weight), Download(d_bias)};
}

// out, mean and rstd of LayerNormForward or the vectorized one.
template <typename E>
std::vector<std::vector<float>> RunLayerNormForward(bool vectorized, int64_t rows,
                                                    int64_t channels) {
  const size_t count = static_cast<size_t>(rows * channels);
  Buffer<E> x(count), out(count), weight(channels), bias(channels);
  Buffer<float> mean(rows), rstd(rows);
  Upload(x, RandomValues(count, 2.0f, 51));
  Upload(weight, RandomValues(channels, 1.0f, 52));
  Upload(bias, RandomValues(channels, 1.0f, 53));
  if (vectorized) {
    gpu::VectorizedLayerNormForward(out.data, mean.data, rstd.data, x.data, weight.data, bias.data,
                                    rows, channels, nullptr);
  } else {
    gpu::LayerNormForward(out.data, mean.data, rstd.data, x.data, weight.data, bias.data, rows,
                          channels, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {Download(out), Download(mean), Download(rstd)};
}

// d12's width, and one that is no multiple of 8 (bf16 falls back).
TEST(Gpt2Kernels, VectorizedLayerNormForwardMatchesLayerNormForward) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  for (const int64_t channels : {768, 100}) {
    const auto reference = RunLayerNormForward<float>(false, 512, channels);
    const auto unfused = RunLayerNormForward<bf16>(false, 512, channels);
    const auto vectorized = RunLayerNormForward<bf16>(true, 512, channels);
    const auto vectorized_float = RunLayerNormForward<float>(true, 512, channels);
    const char* names[] = {"out", "mean", "rstd"};
    for (int i = 0; i < 3; ++i) {
      const std::string what = std::string("vectorized layernorm forward ") + names[i] +
                               " rows=512 C=" + std::to_string(channels);
      EXPECT_TRUE(Compare(what + " bf16", vectorized[i], unfused[i], reference[i]));
      EXPECT_TRUE(Compare(what + " fp32", vectorized_float[i], reference[i], reference[i]));
    }
  }
}

// d12's width over 512 rows, and a width that is no multiple of 32 (nor
// of 8: bf16 takes the kernel's one-channel-per-lane form).
TEST(Gpt2Kernels, FusedLayerNormBackwardMatchesTheTwoKernels) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  for (const int64_t channels : {768, 100}) {
    const auto reference = RunLayerNormBackward<float>(false, 512, channels);
    const auto unfused = RunLayerNormBackward<bf16>(false, 512, channels);
    const auto fused = RunLayerNormBackward<bf16>(true, 512, channels);
    const auto fused_float = RunLayerNormBackward<float>(true, 512, channels);
    const char* names[] = {"d_in", "d_weight", "d_bias"};
    for (int i = 0; i < 3; ++i) {
      const std::string what = std::string("fused layernorm backward ") + names[i] +
                               " rows=512 C=" + std::to_string(channels);
      EXPECT_TRUE(Compare(what + " bf16", fused[i], unfused[i], reference[i]));
      EXPECT_TRUE(Compare(what + " fp32", fused_float[i], reference[i], reference[i]));
    }
  }
}

// d_bias (accumulated onto a random start) of BiasBackward or the
// vectorized one.
template <typename E>
std::vector<float> RunBiasBackward(bool vectorized, int64_t rows, int64_t channels) {
  Buffer<E> d_out(static_cast<size_t>(rows * channels));
  Buffer<float> d_bias(static_cast<size_t>(channels));
  Upload(d_out, RandomValues(static_cast<size_t>(rows * channels), 1.0f, 41));
  Upload(d_bias, RandomValues(static_cast<size_t>(channels), 1.0f, 42));
  if (vectorized) {
    gpu::VectorizedBiasBackward(d_bias.data, d_out.data, rows, channels, nullptr);
  } else {
    gpu::BiasBackward(d_bias.data, d_out.data, rows, channels, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return Download(d_bias);
}

// d12's qkv width, a narrow one, and one that is no multiple of 8 (bf16
// falls back), over a row count that is no multiple of the 128-row chunks.
TEST(Gpt2Kernels, VectorizedBiasBackwardMatchesBiasBackward) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  for (const int64_t channels : {2304, 96, 100}) {
    const auto reference = RunBiasBackward<float>(false, 1000, channels);
    const std::string what = "vectorized bias backward rows=1000 C=" + std::to_string(channels);
    EXPECT_TRUE(Compare(what + " bf16", RunBiasBackward<bf16>(true, 1000, channels),
                        RunBiasBackward<bf16>(false, 1000, channels), reference));
    EXPECT_TRUE(Compare(what + " fp32", RunBiasBackward<float>(true, 1000, channels), reference,
                        reference));
  }
}

// The optimizer in one launch (chunks) against one launch per piece: three
// pieces in two gradient groups (the second its own allocation, as a
// reducer's bucket is), one piece longer than a chunk, weight decay on two,
// the norm clipped.
TEST(Gpt2Kernels, ChunkedAdamWMatchesTheUpdatePerPiece) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  struct PieceOfTest {
    int64_t offset, count;
    int32_t group;
    bool decays;
  };
  const std::vector<PieceOfTest> pieces = {
      {0, 1000, 0, true}, {1000, 40000, 0, false}, {41000, 70000, 1, true}};
  const int64_t group_offsets[] = {0, 41000};
  const int64_t total = 111000;
  const std::vector<float> master = RandomValues(total, 1.0f, 21);
  const std::vector<float> gradients = RandomValues(total, 0.5f, 22);
  std::vector<float> first = RandomValues(total, 0.1f, 23);
  std::vector<float> second = RandomValues(total, 0.01f, 24);
  for (float& value : second) value = std::fabs(value);
  std::vector<gpu::ParameterChunk> chunks;
  for (const PieceOfTest& piece : pieces) {
    for (int64_t start = 0; start < piece.count; start += gpu::kParameterChunkElements) {
      chunks.push_back(
          {piece.offset + start, group_offsets[piece.group],
           static_cast<int32_t>(std::min(gpu::kParameterChunkElements, piece.count - start)),
           piece.group, piece.decays ? 1 : 0});
    }
  }
  gpu::AdamWStep step{};
  step.learning_rate = 3e-3f;
  step.beta1 = 0.9f;
  step.beta2 = 0.95f;
  step.epsilon = 1e-8f;
  step.weight_decay = 0.1f;
  step.first_correction = 1.0f - 0.9f * 0.9f;
  step.second_correction = 1.0f - 0.95f * 0.95f;
  step.gradient_scale = 0.5f;
  step.max_norm = 1.0f;  // far below the norm: clipped

  // results[0]: per piece, results[1]: chunked; each master, m, v, bf16
  // parameters and the sum of squares.
  std::vector<float> results[2][5];
  for (int chunked = 0; chunked < 2; ++chunked) {
    Buffer<float> master_device(total), first_device(total), second_device(total), group0(41000),
        group1(70000), sum(1);
    Buffer<bf16> parameters(total);
    Buffer<gpu::ParameterChunk> chunks_device(chunks.size());
    Buffer<const float*> group_pointers(2);
    Upload(master_device, master);
    Upload(first_device, first);
    Upload(second_device, second);
    Upload(group0, std::vector<float>(gradients.begin(), gradients.begin() + 41000));
    Upload(group1, std::vector<float>(gradients.begin() + 41000, gradients.end()));
    const float* pointers[] = {group0.data, group1.data};
    CUDA_OK(cudaMemcpy(group_pointers.data, pointers, sizeof(pointers), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(chunks_device.data, chunks.data(),
                       chunks.size() * sizeof(gpu::ParameterChunk), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(sum.data, 0, sizeof(float)));
    if (chunked) {
      gpu::ChunkedSumOfSquares(sum.data, chunks_device.data, static_cast<int64_t>(chunks.size()),
                               group_pointers.data, nullptr);
      gpu::ChunkedAdamWUpdate(master_device.data, parameters.data, first_device.data,
                              second_device.data, chunks_device.data,
                              static_cast<int64_t>(chunks.size()), group_pointers.data, step,
                              sum.data, nullptr);
    } else {
      gpu::AddSumOfSquares(sum.data, group0.data, 41000, nullptr);
      gpu::AddSumOfSquares(sum.data, group1.data, 70000, nullptr);
      for (const PieceOfTest& piece : pieces) {
        const float* piece_gradients = (piece.group == 0 ? group0.data : group1.data) +
                                       (piece.offset - group_offsets[piece.group]);
        gpu::AdamWUpdate(master_device.data + piece.offset, parameters.data + piece.offset,
                         piece_gradients, first_device.data + piece.offset,
                         second_device.data + piece.offset, piece.count, piece.decays, step,
                         sum.data, nullptr);
      }
    }
    CUDA_OK(cudaDeviceSynchronize());
    results[chunked][0] = Download(master_device);
    results[chunked][1] = Download(first_device);
    results[chunked][2] = Download(second_device);
    results[chunked][3] = Download(parameters);
    results[chunked][4] = Download(sum);
  }
  const char* names[] = {"master weights", "first moment", "second moment", "bf16 parameters",
                         "sum of squares"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(Compare(std::string("chunked AdamW ") + names[i] + " n=111000", results[1][i],
                        results[0][i], results[0][i]))
        << names[i];
  }
}

// Milliseconds per call of `work`, after one warm-up, over `repeats`.
template <typename Work>
float TimeMs(Work work, int repeats) {
  work();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < repeats; ++i) work();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / static_cast<float>(repeats);
}

// GPT-2 d12's attention per layer (micro-batch 8, T = 1024): figures for
// docs/performance.md. One layer's forward and backward, fused and unfused.
template <typename E>
void TimeAttentionAtTheD12Shape() {
  const Shape s{8, 12, 1024};
  const size_t qkv_count = static_cast<size_t>(s.rows() * 3 * s.channels());
  const size_t out_count = static_cast<size_t>(s.rows() * s.channels());
  Buffer<E> qkv(qkv_count), d_out(out_count), out(out_count), d_qkv(qkv_count);
  Buffer<float> logsumexp(static_cast<size_t>(s.rows() * s.heads)),
      scratch(static_cast<size_t>(s.rows() * s.heads));
  EXPECT_NE(d_qkv.data, nullptr);
  Upload(qkv, RandomValues(qkv_count, 2.0f, 5));
  Upload(d_out, RandomValues(out_count, 1.0f, 6));
  constexpr int kRepeats = 10;
  const float fused_forward = TimeMs(
      [&] {
        gpu::FusedAttentionForward(out.data, logsumexp.data, qkv.data, s.batch, s.sequence, s.heads,
                                   nullptr);
      },
      kRepeats);
  float fused_backward = TimeMs(
      [&] {
        gpu::FusedAttentionBackward(d_qkv.data, scratch.data, d_out.data, qkv.data, out.data,
                                    logsumexp.data, s.batch, s.sequence, s.heads, nullptr);
      },
      kRepeats);
  if constexpr (std::is_same_v<E, bf16>) {
    const float wmma_forward = TimeMs(
        [&] {
          gpu::FusedAttentionForwardWmma(out.data, logsumexp.data, qkv.data, s.batch, s.sequence,
                                         s.heads, nullptr);
        },
        kRepeats);
    const float wmma_backward = TimeMs(
        [&] {
          gpu::FusedAttentionBackwardWmma(d_qkv.data, scratch.data, d_out.data, qkv.data, out.data,
                                          logsumexp.data, s.batch, s.sequence, s.heads, nullptr);
        },
        kRepeats);
    std::printf(
        "attention %s bf16: mma.sync forward %.3f ms, backward %.3f ms; wmma version forward "
        "%.3f ms, backward %.3f ms\n",
        s.Name().c_str(), fused_forward, fused_backward, wmma_forward, wmma_backward);
  } else {
    // What the model runs in float32: one backward kernel accumulating dQ.
    const float two_kernels = fused_backward;
    fused_backward = TimeMs(
        [&] {
          gpu::FusedAttentionBackwardAccumulatingQueries(d_qkv.data, scratch.data, d_out.data,
                                                         qkv.data, out.data, logsumexp.data,
                                                         s.batch, s.sequence, s.heads, nullptr);
        },
        kRepeats);
    std::printf(
        "attention %s fp32 backward: one kernel accumulating dQ %.3f ms, two kernels %.3f ms\n",
        s.Name().c_str(), fused_backward, two_kernels);
  }
  UnfusedAttention<E> unfused(s);
  const float unfused_forward = TimeMs([&] { unfused.Forward(out.data, qkv.data); }, kRepeats);
  const float unfused_backward =
      TimeMs([&] { unfused.Backward(d_qkv.data, d_out.data); }, kRepeats);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Causal flops: 2 products forward, 5 backward, 2·T·T·hs/2 each; the
  // bf16 backward's two kernels both recompute S and dP (7).
  const double product_flops =
      2.0 * s.batch * s.heads * s.sequence * s.sequence * static_cast<double>(s.head_size) / 2.0;
  std::printf(
      "attention %s %s, one layer: fused forward %.3f ms (%.0f TFLOP/s), backward %.3f ms "
      "(%.0f TFLOP/s); unfused forward %.3f ms, backward %.3f ms; speed-up forward %.2fx, "
      "backward %.2fx\n",
      s.Name().c_str(), std::is_same_v<E, float> ? "fp32" : "bf16", fused_forward,
      2 * product_flops / (fused_forward * 1e9), fused_backward,
      (std::is_same_v<E, float> ? 5 : 7) * product_flops / (fused_backward * 1e9), unfused_forward,
      unfused_backward, unfused_forward / fused_forward, unfused_backward / fused_backward);
  std::fflush(stdout);
}

// Figures only (speed is measured, never asserted): one layer of d12's
// attention, fused and unfused, bf16 and fp32.
TEST(Gpt2Kernels, AttentionTimesAtTheD12Shape) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  TimeAttentionAtTheD12Shape<bf16>();
  TimeAttentionAtTheD12Shape<float>();
}

}  // namespace
