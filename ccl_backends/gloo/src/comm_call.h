// How every ABI entry that takes a communicator runs its body: holding a
// reference (so an abort from another thread cannot free it mid-call), with
// SIGPIPE blocked, exceptions turned into result codes, and a failure that
// leaves the communicator unusable kept as its asynchronous error.
#pragma once

#include <string>

#include "communicator.h"
#include "errors.h"
#include "infini/ccl/plugin_abi.h"
#include "sigpipe.h"

namespace infini::gloo_backend {

// Failures that leave a communicator unusable, kept as its async error.
inline bool BreaksCommunicator(infiniCclResult_t result) {
  return result == infiniCclRemoteError || result == infiniCclTimeout ||
         result == infiniCclSystemError || result == infiniCclInternalError ||
         result == infiniCclAborted;
}

// Runs `body(comm)`. A failure on an aborted communicator is reported as
// infiniCclAborted.
template <class Body>
infiniCclResult_t CommCall(const char* call, infiniCclComm_t handle, Body&& body) noexcept {
  Communicator* comm = FromHandle(handle);
  if (comm == nullptr) return Fail(infiniCclInvalidArgument, std::string(call) + ": comm is NULL");
  comm->Acquire();
  ScopedSigpipeBlock no_sigpipe;
  infiniCclResult_t result = Guarded(call, [&] {
    comm->ThrowIfAborted();
    body(*comm);
    return infiniCclSuccess;
  });
  if (result != infiniCclSuccess && result != infiniCclAborted && comm->aborted()) {
    result = Fail(infiniCclAborted,
                  std::string(call) + ": the communicator was aborted (" + LastError() + ")");
  }
  if (BreaksCommunicator(result)) comm->RecordAsyncError(result, LastError());
  comm->Release();
  return result;
}

}  // namespace infini::gloo_backend
