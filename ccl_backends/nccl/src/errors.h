// Result codes and the per-thread explanation of the last failure.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <exception>
#include <string>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// Keeps `message` as the calling thread's explanation and returns `result`.
infiniCclResult_t Fail(infiniCclResult_t result, std::string message);
// The text get_last_error() returns ("" if nothing failed on this thread).
const char* LastError();

const char* ResultString(infiniCclResult_t result);

// NCCL's codes and ours mean the same things; only ncclUnhandledCudaError is
// renamed, as our API does not name a vendor.
infiniCclResult_t FromNccl(ncclResult_t result);
// On failure, records "<call>: <NCCL's text> (<ncclGetLastError>)".
infiniCclResult_t CheckNccl(ncclResult_t result, std::string_view call, ncclComm_t comm = nullptr);
// On failure, records "<call>: <CUDA's error name and text>" and clears the
// runtime's (non-sticky) error state so that later calls do not inherit it.
infiniCclResult_t CheckCuda(cudaError_t error, std::string_view call);

// Returns `expression`'s result (an infiniCclResult_t) from the calling
// function unless it is infiniCclSuccess, as NCCL's NCCLCHECK: whoever failed
// has already recorded the text, and ncclResult_t is translated only by
// FromNccl/CheckNccl/Enqueued, so this forwards and never maps.
#define CCLCHECK(expression)                                    \
  do {                                                          \
    if (const infiniCclResult_t cclcheck_result = (expression); \
        cclcheck_result != infiniCclSuccess) [[unlikely]] {     \
      return cclcheck_result;                                   \
    }                                                           \
  } while (false)

// Runs `body` (which returns infiniCclResult_t) and turns any escaping
// exception into infiniCclInternalError: no exception may cross the C ABI.
template <typename Body>
infiniCclResult_t Guarded(std::string_view call, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& error) {
    return Fail(infiniCclInternalError, std::string(call) + ": " + error.what());
  } catch (...) {
    return Fail(infiniCclInternalError, std::string(call) + ": unknown exception");
  }
}

}  // namespace infini::ccl::nccl
