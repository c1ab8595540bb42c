// Checks and result mapping shared by every collective entry. The hot path:
// each is a compare; text is built only when something fails.
#pragma once

#include <nccl.h>

#include <string>

#include "communicator.h"
#include "errors.h"
#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// A revoked communicator (comm_revoke, or a parent shrunk with the abort
// flag) refuses new work, as the ABI promises, whatever NCCL would do.
inline infiniCclResult_t RequireComm(infiniCclComm_t comm, const char* call) {
  if (comm != nullptr && comm->nccl != nullptr && !comm->revoked.load(std::memory_order_relaxed))
      [[likely]] {
    return infiniCclSuccess;
  }
  if (comm != nullptr && comm->nccl != nullptr) {
    return Fail(infiniCclRemoteError, std::string(call) +
                                          ": the communicator was revoked (comm_revoke); shrink "
                                          "it or destroy it");
  }
  return Fail(infiniCclInvalidArgument, std::string(call) + ": communicator is NULL");
}

// NCCL 2.28.3 over a single rank leaves the tail of a large out-of-place
// average unwritten (measured on an H200: of 262,147 elements of any float
// type, the last 3 keep what was there, in all_reduce, reduce and
// reduce_scatter). Over one rank the average is the sum, which it gets right.
inline ncclRedOp_t SingleRankSafe(ncclRedOp_t op, infiniCclComm_t comm) {
  return op == ncclAvg && comm->nranks.load(std::memory_order_relaxed) == 1 ? ncclSum : op;
}

// ncclInProgress (a non-blocking communicator) maps to infiniCclInProgress;
// any other failure keeps NCCL's text for get_last_error().
inline infiniCclResult_t Enqueued(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result == ncclSuccess) [[likely]] {
    return infiniCclSuccess;
  }
  return CheckNccl(result, call, comm);
}

// Runs `body` (which enqueues NCCL calls and returns infiniCclResult_t)
// inside one ncclGroupStart/End, so its sends and receives progress
// together. The group is closed even after a failure, or the calling thread
// would stay inside it.
template <typename Body>
infiniCclResult_t InNcclGroup(const char* call, ncclComm_t comm, Body&& body) {
  CCLCHECK(CheckNccl(ncclGroupStart(), std::string(call) + ": ncclGroupStart"));
  const infiniCclResult_t first_failure = body();
  const infiniCclResult_t ended =
      CheckNccl(ncclGroupEnd(), std::string(call) + ": ncclGroupEnd", comm);
  return first_failure != infiniCclSuccess ? first_failure : ended;
}

}  // namespace infini::ccl::nccl
