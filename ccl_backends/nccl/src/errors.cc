#include "errors.h"

#include <utility>

namespace infini::ccl::nccl {
namespace {

thread_local std::string last_error;

}  // namespace

infiniCclResult_t Fail(infiniCclResult_t result, std::string message) {
  try {
    last_error = std::move(message);
  } catch (...) {
    // Out of memory while keeping the text: the code alone still explains.
  }
  return result;
}

const char* LastError() { return last_error.c_str(); }

const char* ResultString(infiniCclResult_t result) {
  switch (result) {
    case infiniCclSuccess:
      return "no error";
    case infiniCclUnhandledDeviceError:
      return "unhandled CUDA error";
    case infiniCclSystemError:
      return "system error (a system call or the network failed)";
    case infiniCclInternalError:
      return "internal error (a bug in the plugin or NCCL)";
    case infiniCclInvalidArgument:
      return "invalid argument";
    case infiniCclInvalidUsage:
      return "invalid usage";
    case infiniCclRemoteError:
      return "remote error (a peer failed or went away)";
    case infiniCclInProgress:
      return "operation in progress";
    case infiniCclTimeout:
      return "timeout";
    case infiniCclAborted:
      return "communicator aborted";
    case infiniCclUnsupported:
      return "unsupported by the nccl backend";
    case infiniCclNumResults:
      break;
  }
  return "unknown result code";
}

infiniCclResult_t FromNccl(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return infiniCclSuccess;
    case ncclUnhandledCudaError:
      return infiniCclUnhandledDeviceError;
    case ncclSystemError:
      return infiniCclSystemError;
    case ncclInternalError:
      return infiniCclInternalError;
    case ncclInvalidArgument:
      return infiniCclInvalidArgument;
    case ncclInvalidUsage:
      return infiniCclInvalidUsage;
    case ncclRemoteError:
      return infiniCclRemoteError;
    case ncclInProgress:
      return infiniCclInProgress;
    default:
      return infiniCclInternalError;
  }
}

infiniCclResult_t CheckNccl(ncclResult_t result, std::string_view call, ncclComm_t comm) {
  if (result == ncclSuccess) return infiniCclSuccess;
  std::string message = std::string(call) + ": " + ncclGetErrorString(result);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && *detail != '\0') message += " (" + std::string(detail) + ")";
  return Fail(FromNccl(result), std::move(message));
}

infiniCclResult_t CheckCuda(cudaError_t error, std::string_view call) {
  if (error == cudaSuccess) return infiniCclSuccess;
  cudaGetLastError();
  const infiniCclResult_t result =
      error == cudaErrorInvalidValue ? infiniCclInvalidArgument : infiniCclUnhandledDeviceError;
  return Fail(result, std::string(call) + ": " + cudaGetErrorName(error) + ": " +
                          cudaGetErrorString(error));
}

}  // namespace infini::ccl::nccl
