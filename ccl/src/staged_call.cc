#include "staged_call.h"

#include <atomic>
#include <string>
#include <utility>

namespace infini::ccl::internal::staged {
namespace {

thread_local int t_group_depth = 0;
thread_local std::vector<GroupedCall> t_grouped;

// A deferred call: the caller's part (see staged_collectives.cc).
infiniCclResult_t Defer(StagedComm& comm, infiniCclStream_t caller, const char* call, Body body) {
  if (comm.aborting.load(std::memory_order_acquire)) {
    return Fail(infiniCclAborted, std::string(call) + ": the communicator was aborted");
  }
  {
    std::lock_guard<std::mutex> lock(comm.error_mutex);
    if (comm.async_error != infiniCclSuccess) {
      return Fail(comm.async_error,
                  std::string(call) +
                      ": an earlier call on this communicator failed: " + comm.async_message);
    }
  }
  infiniCclEvent_t ready = nullptr;
  infiniCclResult_t result = comm.ready_events.Take(&ready);
  if (result != infiniCclSuccess) return result;
  result = FromPlugin(Device(), Device().event_record(ready, caller), call);
  const uint32_t ticket = comm.issued + 1;
  if (result == infiniCclSuccess) {
    result = FromPlugin(Device(), Device().stream_wait_host_flag(caller, comm.flag, ticket), call);
  }
  if (result != infiniCclSuccess) {
    comm.ready_events.Give(ready);
    return result;
  }
  comm.issued = ticket;
  comm.worker->Submit([&comm, ready, ticket, call, body = std::move(body)] {
    infiniCclResult_t ran = infiniCclAborted;
    if (comm.aborting.load(std::memory_order_acquire)) {
      Fail(ran, std::string(call) + ": the communicator was aborted");
    } else {
      Stage stage(comm, ready, call);
      ran = body(stage);
    }
    if (ran != infiniCclSuccess) comm.RecordAsyncError(ran, LastError());
    comm.ready_events.Give(ready);
    // Releases the caller's stream, also after a failure: its work goes on
    // with what the buffers hold, as after a failed device collective.
    __atomic_store_n(comm.flag, ticket, __ATOMIC_RELEASE);
  });
  return infiniCclSuccess;
}

}  // namespace

int& GroupDepth() { return t_group_depth; }
std::vector<GroupedCall>& GroupedCalls() { return t_grouped; }

infiniCclResult_t Run(infiniCclComm_t handle, infiniCclStream_t caller, const char* call,
                      Body body) {
  StagedComm& comm = *Of(handle);
  if (comm.flag != nullptr && t_group_depth == 0) {
    return Defer(comm, caller, call, std::move(body));
  }
  DrainDeferred(comm);
  Stage stage(handle, caller, call);
  return body(stage);
}
}  // namespace infini::ccl::internal::staged
