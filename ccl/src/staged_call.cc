#include "staged_call.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

namespace infini::ccl::internal::staged {
namespace {

thread_local int t_group_depth = 0;
thread_local std::vector<GroupedCall> t_grouped;

bool Reached(const uint32_t* word, uint32_t value) {
  return static_cast<int32_t>(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) >= 0;
}

// Until the stream wrote `value` or more (cyclically) into `word`: spins a
// little (a chunk's copy is often done by now), then yields, then sleeps
// 20 us at a time so that ranks sharing cores leave them to the others.
// Without a deadline: the device is this process's, and a stream that
// never gets there is ended by comm_abort.
infiniCclResult_t AwaitWord(const uint32_t* word, uint32_t value, const std::atomic<bool>& aborting,
                            const char* call) {
  for (int round = 0; !Reached(word, value); ++round) {
    if (aborting.load(std::memory_order_acquire)) {
      return Fail(infiniCclAborted, std::string(call) + ": the communicator was aborted");
    }
    if (round < 256) continue;
    if (round < 2048) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return infiniCclSuccess;
}

}  // namespace

int& GroupDepth() { return t_group_depth; }
std::vector<GroupedCall>& GroupedCalls() { return t_grouped; }

void RunHostJob(StagedComm& comm, HostJob& job) {
  bool failed = job.failed;
  if (!failed && comm.aborting.load(std::memory_order_acquire)) {
    comm.RecordAsyncError(infiniCclAborted,
                          std::string(job.call) + ": the communicator was aborted");
    failed = true;
  }
  for (HostStep& step : job.steps) {
    infiniCclResult_t result = infiniCclSuccess;
    switch (step.kind) {
      case HostStep::Kind::kSignal:
        // Written after a failure too: the stream must not wait forever.
        __atomic_store_n(comm.Word(step.word), step.value, __ATOMIC_RELEASE);
        continue;
      case HostStep::Kind::kAwait:
        if (!failed) result = AwaitWord(comm.Word(step.word), step.value, comm.aborting, job.call);
        break;
      case HostStep::Kind::kRun:
        if (!failed) result = step.run();
        break;
    }
    if (result != infiniCclSuccess) {
      comm.RecordAsyncError(result, LastError());
      failed = true;
    }
  }
  if (failed && job.on_failure) job.on_failure();
}

infiniCclResult_t Run(infiniCclComm_t handle, infiniCclStream_t caller, const char* call,
                      Body body) {
  StagedComm& comm = *Of(handle);
  const bool proxied = comm.proxied() && t_group_depth == 0;
  if (proxied) {
    // A proxied call's failure shows later: the calls after it are refused.
    if (comm.aborting.load(std::memory_order_acquire)) {
      return Fail(infiniCclAborted, std::string(call) + ": the communicator was aborted");
    }
    std::lock_guard<std::mutex> lock(comm.error_mutex);
    if (comm.async_error != infiniCclSuccess) {
      return Fail(comm.async_error,
                  std::string(call) +
                      ": an earlier call on this communicator failed: " + comm.async_message);
    }
  } else {
    DrainHostSteps(comm);
  }
  Stage stage(handle, caller, call, proxied);
  return body(stage);
}

}  // namespace infini::ccl::internal::staged
