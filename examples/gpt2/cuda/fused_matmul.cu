#include <cuda_bf16.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "fused_matmul.h"

namespace infini::examples::gpt2::gpu {
namespace {

// cuBLASLt's larger algorithms want scratch; 32 MiB is what PyTorch gives it
// on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The largest power of two (up to 256, cuBLASLt's default assumption) that
// divides the address.
unsigned Alignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  unsigned alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

cublasLtEpilogue_t LtEpilogue(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kGeluGradient:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

struct FusedMatmul::Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // c: d's layout
  cublasLtMatmulAlgo_t algorithm{};
  bool usable = false;

  ~Plan() {
    if (operation != nullptr) cublasLtMatmulDescDestroy(operation);
    for (cublasLtMatrixLayout_t layout : {a, b, d}) {
      if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
    }
  }
};

FusedMatmul::FusedMatmul(cudaStream_t stream) : stream_(stream) {
  if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error("cuBLASLt: cannot create a handle");
  }
  if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess) {
    cublasLtDestroy(handle_);
    throw std::runtime_error("gpt2: cannot allocate the 32 MiB cuBLASLt workspace on the GPU");
  }
}

FusedMatmul::~FusedMatmul() {
  plans_.clear();  // before the handle they were made with
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

template <typename T>
bool FusedMatmul::Run(Epilogue epilogue, bool a_transposed, int64_t m, int64_t n, int64_t k,
                      const T* a, const T* b, T* d, const T* bias, T* aux, const T* residual) {
  constexpr cudaDataType_t type = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
  // GELU's input matrix needs a leading dimension divisible by 8.
  if (epilogue != Epilogue::kBias && m % 8 != 0) return false;
  const Key key{static_cast<int>(epilogue),
                a_transposed,
                m,
                n,
                k,
                static_cast<int>(sizeof(T)),
                Alignment(a),
                Alignment(b),
                Alignment(d),
                Alignment(bias),
                Alignment(aux),
                residual == nullptr ? 0u : Alignment(residual)};
  auto found = plans_.find(key);
  if (found == plans_.end()) {
    found = plans_.emplace(key, std::make_unique<Plan>()).first;
    Plan* plan = found->second.get();
    const cublasOperation_t transa = a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t transb = CUBLAS_OP_N;
    const cublasLtEpilogue_t lt_epilogue = LtEpilogue(epilogue);
    const int64_t aux_ld = m;
    bool ok = cublasLtMatmulDescCreate(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
              CUBLAS_STATUS_SUCCESS;
    const auto set = [&](cublasLtMatmulDescAttributes_t attribute, const void* value, size_t size) {
      ok = ok && cublasLtMatmulDescSetAttribute(plan->operation, attribute, value, size) ==
                     CUBLAS_STATUS_SUCCESS;
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa));
    set(CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb));
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &lt_epilogue, sizeof(lt_epilogue));
    // The heuristic reads the pointers' alignment from these.
    if (epilogue != Epilogue::kGeluGradient)
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (epilogue != Epilogue::kBias) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
    }
    const auto layout = [&](cublasLtMatrixLayout_t* out, int64_t rows, int64_t columns) {
      ok = ok && cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(rows),
                                            static_cast<uint64_t>(columns),
                                            rows) == CUBLAS_STATUS_SUCCESS;
    };
    layout(&plan->a, a_transposed ? k : m, a_transposed ? m : k);
    layout(&plan->b, k, n);
    layout(&plan->d, m, n);
    cublasLtMatmulPreference_t preference = nullptr;
    ok = ok && cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS;
    const auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                            size_t size) {
      ok = ok && cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, size) ==
                     CUBLAS_STATUS_SUCCESS;
    };
    const uint64_t workspace = kWorkspaceBytes;
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
    const unsigned a_alignment = std::get<6>(key), b_alignment = std::get<7>(key),
                   d_alignment = std::get<8>(key),
                   c_alignment = residual == nullptr ? d_alignment : std::get<11>(key);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_alignment, sizeof(a_alignment));
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_alignment, sizeof(b_alignment));
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_alignment, sizeof(c_alignment));
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_alignment, sizeof(d_alignment));
    cublasLtMatmulHeuristicResult_t result{};
    int results = 0;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(handle_, plan->operation, plan->a, plan->b, plan->d,
                                              plan->d, preference, 1, &result,
                                              &results) == CUBLAS_STATUS_SUCCESS;
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    plan->usable = ok && results > 0;
    if (plan->usable) plan->algorithm = result.algo;
  }
  Plan& plan = *found->second;
  if (!plan.usable) return false;
  bool ok = true;
  if (epilogue != Epilogue::kGeluGradient) {
    ok = cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof(bias)) == CUBLAS_STATUS_SUCCESS;
  }
  if (ok && epilogue != Epilogue::kBias) {
    ok = cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                        &aux, sizeof(aux)) == CUBLAS_STATUS_SUCCESS;
  }
  // D = A·B (+ bias …) + beta·C, C the residual or (beta 0) D itself.
  const float one = 1.0f, beta = residual == nullptr ? 0.0f : 1.0f;
  const void* c = residual == nullptr ? static_cast<const void*>(d) : residual;
  ok = ok && cublasLtMatmul(handle_, plan.operation, &one, a, plan.a, b, plan.b, &beta, c, plan.d,
                            d, plan.d, &plan.algorithm, workspace_, kWorkspaceBytes,
                            stream_) == CUBLAS_STATUS_SUCCESS;
  // A refusal at launch is for good: the unfused path from now on.
  if (!ok) plan.usable = false;
  return ok;
}

template bool FusedMatmul::Run<float>(Epilogue, bool, int64_t, int64_t, int64_t, const float*,
                                      const float*, float*, const float*, float*, const float*);
template bool FusedMatmul::Run<__nv_bfloat16>(Epilogue, bool, int64_t, int64_t, int64_t,
                                              const __nv_bfloat16*, const __nv_bfloat16*,
                                              __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                              const __nv_bfloat16*);

}  // namespace infini::examples::gpt2::gpu
