// Matrix products with their elementwise neighbours fused into cuBLASLt
// epilogues, so that no separate pass reads and writes the product again:
// the bias add of a linear layer (kBias), the bias add and GELU of the MLP's
// first layer, keeping the GELU input for the backward (kGeluBias), and the
// GELU gradient applied to the MLP's input gradient (kGeluGradient). Where
// cuBLASLt has no algorithm for a shape and its pointers' alignment, Run
// returns false and the caller takes the unfused path (cuBLAS, then the
// kernels of kernels.h), which computes the same thing.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace infini::examples::gpt2::gpu {

enum class Epilogue { kBias, kGeluBias, kGeluGradient };

class FusedMatmul {
 public:
  // Work goes to `stream` (not owned). Throws std::runtime_error with one
  // line when cuBLASLt or its workspace cannot be had.
  explicit FusedMatmul(cudaStream_t stream);
  ~FusedMatmul();
  FusedMatmul(const FusedMatmul&) = delete;
  FusedMatmul& operator=(const FusedMatmul&) = delete;

  // Column-major, as cuBLAS: d (m × n, leading dimension m) = op(a) · b with
  // b k × n (leading dimension k); op(a) = aᵀ of a stored k × m when
  // `a_transposed`, else a stored m × k. Float accumulation; T is float or
  // __nv_bfloat16.
  //   kBias:         d = op(a)·b + bias (bias: m values, one per row of d),
  //                  + residual when given (m × n like d: a residual add)
  //   kGeluBias:     aux = op(a)·b + bias; d = gelu(aux) (tanh approximation)
  //   kGeluGradient: d = (op(a)·b) ∘ gelu'(aux)
  // aux is m × n with leading dimension m. False: nothing was enqueued.
  template <typename T>
  bool Run(Epilogue epilogue, bool a_transposed, int64_t m, int64_t n, int64_t k, const T* a,
           const T* b, T* d, const T* bias, T* aux, const T* residual = nullptr);

 private:
  struct Plan;
  // (epilogue, a_transposed, m, n, k, element size, alignments of a, b, d,
  // bias, aux, residual (0: none)): cuBLASLt picks its algorithm by the
  // pointers' alignment too.
  using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int, unsigned, unsigned, unsigned,
                         unsigned, unsigned, unsigned>;

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace infini::examples::gpt2::gpu
