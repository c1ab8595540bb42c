// One staged call (staged_collectives.cc's collectives are made of it): its
// device steps (copies on the communicator's stream), its host steps (the
// transport's collective, waits in the shared segment) and the signals that
// order them, run by one of two executors:
// - proxied (the device plugin writes and waits on host flags): the caller
//   enqueues every device step and returns; the communicator's worker runs
//   the host steps, polling words the stream writes and writing words the
//   stream waits on. The worker never calls the device runtime, so a
//   device-wide synchronization by any thread (cudaFree, cudaMalloc) waits
//   only for work that is already enqueued and needs nothing but the host
//   and the peers (NCCL's proxy thread has the same shape);
// - inline (no host flags, or in a group): the caller runs
//   the host steps itself, a device signal being an event it synchronizes.
// A collective is written once, in program order, and means the same under
// both.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "staged_comm.h"
#include "staged_shared_memory.h"

namespace infini::ccl::internal::staged {

inline size_t ElementBytes(DLDataType dtype) {
  return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

// Collectives between GroupStart and GroupEnd on this thread: the
// transport runs them at its group_end, so each keeps host buffers of its
// own until then, and its copies back are enqueued after it.
struct CopyBack {
  void* device;
  size_t host_offset, bytes;
};
struct GroupedCall {
  StagedComm* comm;
  infiniCclStream_t caller;
  std::unique_ptr<char[]> send, recv;
  std::vector<CopyBack> copies;
};
// This thread's group depth and grouped calls (GroupStart/GroupEnd).
int& GroupDepth();
std::vector<GroupedCall>& GroupedCalls();

// A proxied call's host steps, in order, for the worker (RunHostJob).
struct HostStep {
  enum class Kind { kAwait, kSignal, kRun };
  Kind kind;
  Signal word;
  uint32_t value;
  std::function<infiniCclResult_t()> run;  // kRun: a failure sets LastError()
};
struct HostJob {
  const char* call = "";
  std::vector<HostStep> steps;
  // Run once a step failed (the remaining waits and runs are skipped; the
  // signals are still written, so the stream goes on with what the buffers
  // hold, as after a failed device collective).
  std::function<void()> on_failure;
  bool failed = false;  // an enqueue failed: only the signals are written
};
// On the worker: runs `job`'s steps; a failure is the communicator's
// asynchronous error.
void RunHostJob(StagedComm& comm, HostJob& job);

// One staged call on one communicator: each step does nothing once one
// failed, and Finish says the first failure.
class Stage {
 public:
  // On the caller's thread; `proxied` needs the communicator's words and
  // no group.
  Stage(infiniCclComm_t comm, infiniCclStream_t caller, const char* call, bool proxied = false)
      : comm_(Of(comm)), caller_(caller), call_(call), proxied_(proxied), lock_(comm_->calls) {
    job_.call = call;
    Device(Dev().event_record(comm_->ready, caller_));
    Device(Dev().stream_wait_event(comm_->stream, comm_->ready));
  }

  bool ok() const { return result_ == infiniCclSuccess; }
  bool grouped() const { return GroupDepth() > 0; }
  StagedComm& comm() { return *comm_; }

  // Host buffers of at least these sizes. Growing one waits for the calls
  // in flight (they may still use it); calls no larger than an earlier one
  // never wait.
  void Reserve(size_t send_bytes, size_t recv_bytes) {
    if (!ok()) return;
    if (grouped()) {
      own_send_.reset(new (std::nothrow) char[std::max<size_t>(send_bytes, 1)]);
      own_recv_.reset(new (std::nothrow) char[std::max<size_t>(recv_bytes, 1)]);
      host_send_ = own_send_.get();
      host_recv_ = own_recv_.get();
    } else {
      if (send_bytes > comm_->send.capacity() || recv_bytes > comm_->recv.capacity()) {
        DrainHostSteps(*comm_);
        Device(Dev().stream_synchronize(comm_->stream));
      }
      host_send_ = comm_->send.Reserve(std::max<size_t>(send_bytes, 1));
      host_recv_ = comm_->recv.Reserve(std::max<size_t>(recv_bytes, 1));
    }
    if (ok() && (host_send_ == nullptr || host_recv_ == nullptr)) {
      result_ = Fail(infiniCclSystemError, std::string(call_) + ": cannot allocate " +
                                               std::to_string(send_bytes + recv_bytes) +
                                               " bytes of host staging memory");
    }
  }
  char* host_send() { return host_send_; }
  char* host_recv() { return host_recv_; }

  // The values of the call's next `points` signal points (one per chunk),
  // from the one returned on.
  uint32_t Signals(size_t points) {
    const uint32_t first = comm_->signals + 1;
    comm_->signals += static_cast<uint32_t>(points);
    return first;
  }

  // ---- Device steps: on the communicator's stream, in program order.
  void ToHost(char* host, const void* device, size_t bytes) {
    if (ok() && bytes > 0) {
      Device(Dev().memcpy_async(host, device, bytes, infiniCclMemcpyDeviceToHost, comm_->stream));
    }
  }
  // From host_recv() + offset; in a group, after the group's end.
  void ToDevice(void* device, size_t offset, size_t bytes) {
    if (!ok() || bytes == 0) return;
    if (grouped()) {
      copies_.push_back({device, offset, bytes});
      return;
    }
    ToDeviceFrom(device, host_recv_ + offset, bytes);
  }
  // From any host address (the shared result slot).
  void ToDeviceFrom(void* device, const char* host, size_t bytes) {
    if (ok() && bytes > 0) {
      Device(Dev().memcpy_async(device, host, bytes, infiniCclMemcpyHostToDevice, comm_->stream));
    }
  }
  // The stream's work so far is done: for the host (kInputCopied, kResultCopied).
  void DeviceSignals(Signal word, uint32_t value) {
    if (!ok()) return;
    if (proxied_) {
      Device(Dev().stream_write_host_flag(comm_->stream, comm_->Word(word), value));
    } else {
      Device(Dev().event_record(comm_->SignalEvent(word, value), comm_->stream));
    }
  }
  // The stream goes on once the host signalled (kSlotFree, kResultReady);
  // inline, the host did before this is enqueued.
  void DeviceAwaits(Signal word, uint32_t value) {
    if (ok() && proxied_) {
      Device(Dev().stream_wait_host_flag(comm_->stream, comm_->Word(word), value));
    }
  }

  // ---- Host steps: on the worker (proxied) or now.
  void HostAwaits(Signal word, uint32_t value) {
    if (!ok()) return;
    if (proxied_) {
      job_.steps.push_back({HostStep::Kind::kAwait, word, value, nullptr});
    } else {
      Device(Dev().event_synchronize(comm_->SignalEvent(word, value)));
    }
  }
  void HostSignals(Signal word, uint32_t value) {
    if (ok() && proxied_) job_.steps.push_back({HostStep::Kind::kSignal, word, value, nullptr});
  }
  // `step` returns its failure with LastError() set (Fail, FromPlugin).
  void OnHost(std::function<infiniCclResult_t()> step) {
    if (!ok()) return;
    if (proxied_) {
      job_.steps.push_back({HostStep::Kind::kRun, Signal::kInputCopied, 0, std::move(step)});
    } else {
      result_ = step();
    }
  }
  // The transport's entry `result` names, as this call's.
  static infiniCclResult_t Host(infiniCclResult_t result, const char* call) {
    return FromPlugin(Transport(), result, call);
  }
  const char* call() const { return call_; }
  // Runs if a host step failed (proxied) or when Finish sees a failure.
  void OnFailure(std::function<void()> undo) { job_.on_failure = std::move(undo); }

  int Count() {
    int nranks = 0;
    HostNow(Transport().comm_count(comm_->transport, &nranks));
    return nranks;
  }
  int Rank() {
    int rank = 0;
    HostNow(Transport().comm_user_rank(comm_->transport, &rank));
    return rank;
  }

  // Ranks of one host: whether they meet in the communicator's shared
  // segment (opened when the communicator was made).
  bool SharedSlotsOpen() const { return ok() && comm_->shared == StagedComm::SharedUse::kOn; }

  // The caller's stream goes on after the call's device steps; in a group,
  // the buffers wait for GroupEnd.
  infiniCclResult_t Finish() {
    if (proxied_) {
      job_.failed = !ok();
      const infiniCclResult_t enqueued = result_;
      if (!job_.steps.empty() || job_.on_failure) {
        comm_->worker->Submit(
            [comm = comm_, job = std::move(job_)]() mutable { RunHostJob(*comm, job); });
      }
      // The stream is joined even after a failed enqueue: the job releases it.
      result_ = infiniCclSuccess;
      Device(Dev().event_record(comm_->done, comm_->stream));
      Device(Dev().stream_wait_event(caller_, comm_->done));
      if (enqueued != infiniCclSuccess) {
        comm_->RecordAsyncError(enqueued, LastError());
        return enqueued;
      }
      return result_;
    }
    if (!ok() && job_.on_failure) job_.on_failure();
    if (ok() && grouped()) {
      GroupedCalls().push_back(
          {comm_, caller_, std::move(own_send_), std::move(own_recv_), std::move(copies_)});
      return result_;
    }
    if (ok()) Device(Dev().event_record(comm_->done, comm_->stream));
    if (ok()) Device(Dev().stream_wait_event(caller_, comm_->done));
    return result_;
  }

 private:
  static const infiniCclPlugin_t& Dev() { return staged::Device(); }
  void Device(infiniCclResult_t result) {
    if (ok()) result_ = FromPlugin(Dev(), result, call_);
  }
  void HostNow(infiniCclResult_t result) {
    if (ok()) result_ = FromPlugin(Transport(), result, call_);
  }

  StagedComm* comm_;
  infiniCclStream_t caller_;
  const char* call_;
  bool proxied_;
  std::lock_guard<std::mutex> lock_;
  infiniCclResult_t result_ = infiniCclSuccess;
  char* host_send_ = nullptr;
  char* host_recv_ = nullptr;
  std::unique_ptr<char[]> own_send_, own_recv_;
  std::vector<CopyBack> copies_;
  HostJob job_;
};

using Body = std::function<infiniCclResult_t(Stage&)>;

// One staged call: proxied where it can be, else on this thread after the
// proxied ones.
infiniCclResult_t Run(infiniCclComm_t comm, infiniCclStream_t caller, const char* call, Body body);

}  // namespace infini::ccl::internal::staged
