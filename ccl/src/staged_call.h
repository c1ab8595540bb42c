// One staged call (staged_collectives.cc's collectives are made of it):
// the steps on the communicator's stream and host buffers, and where the
// call runs, deferred to the communicator's worker or on the caller's
// thread (staged_collectives.cc says when).
#pragma once

#include <algorithm>
#include <cstddef>
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

// One staged call on one communicator: each step does nothing once one
// failed, and Finish says the first failure.
class Stage {
 public:
  // On the caller's thread.
  Stage(infiniCclComm_t comm, infiniCclStream_t caller, const char* call)
      : comm_(Of(comm)), caller_(caller), call_(call), lock_(comm_->calls) {
    Device(Dev().event_record(comm_->ready, caller_));
    Device(Dev().stream_wait_event(comm_->stream, comm_->ready));
  }
  // On the worker, for a deferred call: its caller recorded `ready` on its
  // stream when it made the call.
  Stage(StagedComm& comm, infiniCclEvent_t ready, const char* call)
      : comm_(&comm), caller_(nullptr), call_(call), lock_(comm_->calls) {
    deferred_ = true;
    Device(Dev().stream_wait_event(comm_->stream, ready));
  }

  bool ok() const { return result_ == infiniCclSuccess; }
  bool grouped() const { return GroupDepth() > 0; }
  StagedComm& comm() { return *comm_; }

  // Host buffers of at least these sizes; the copies still in flight from
  // the last call are waited for before a buffer is replaced.
  void Reserve(size_t send_bytes, size_t recv_bytes) {
    if (!ok()) return;
    if (grouped()) {
      own_send_.reset(new (std::nothrow) char[std::max<size_t>(send_bytes, 1)]);
      own_recv_.reset(new (std::nothrow) char[std::max<size_t>(recv_bytes, 1)]);
      host_send_ = own_send_.get();
      host_recv_ = own_recv_.get();
    } else {
      if (send_bytes > comm_->send.capacity() || recv_bytes > comm_->recv.capacity()) {
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
    Device(Dev().memcpy_async(device, host_recv_ + offset, bytes, infiniCclMemcpyHostToDevice,
                              comm_->stream));
  }
  void MarkCopied(int slot) {
    if (ok()) Device(Dev().event_record(comm_->chunk_copied[slot], comm_->stream));
  }
  void WaitCopied(int slot) {
    if (ok()) Device(Dev().event_synchronize(comm_->chunk_copied[slot]));
  }
  void WaitCopies() {
    if (ok()) Device(Dev().stream_synchronize(comm_->stream));
  }
  void Host(infiniCclResult_t result) {
    if (ok()) result_ = FromPlugin(Transport(), result, call_);
  }
  int Count() {
    int nranks = 0;
    Host(Transport().comm_count(comm_->transport, &nranks));
    return nranks;
  }
  int Rank() {
    int rank = 0;
    Host(Transport().comm_user_rank(comm_->transport, &rank));
    return rank;
  }

  // Ranks of one host: whether the communicator's shared segment is open
  // (opened at its first call that can use one: a collective of the
  // transport, which every rank reaches at the same call).
  bool SharedSlotsOpen() {
    if (!ok()) return false;
    if (comm_->shared == StagedComm::SharedUse::kUnknown) {
      std::string why;
      const infiniCclResult_t opened =
          SharedSlots::Open(Transport(), comm_->transport, &comm_->slots, &why);
      if (opened != infiniCclSuccess && !why.empty()) {
        result_ = Fail(opened, std::string(call_) + ": " + why);
        return false;
      }
      Host(opened);
      comm_->shared = comm_->slots ? StagedComm::SharedUse::kOn : StagedComm::SharedUse::kOff;
      if (comm_->slots) {
        comm_->slots_registered.Register(comm_->slots->mapping(), comm_->slots->mapped_bytes());
      }
    }
    return ok() && comm_->shared == StagedComm::SharedUse::kOn;
  }
  // Waits in the shared segment; a failure is this call's and the
  // communicator's (comm_get_async_error).
  void Shared(SharedSlots::Phase phase, int64_t sequence) {
    if (!ok()) return;
    std::string why;
    const infiniCclResult_t result =
        comm_->slots->WaitAll(phase, sequence, comm_->aborting, comm_->timeout_ms, &why);
    if (result != infiniCclSuccess) {
      result_ = Fail(result, std::string(call_) + ": " + why);
      comm_->RecordAsyncError(result, LastError());
    }
  }
  // From any host address (the shared result slot).
  void ToDeviceFrom(void* device, const char* host, size_t bytes) {
    if (ok() && bytes > 0) {
      Device(Dev().memcpy_async(device, host, bytes, infiniCclMemcpyHostToDevice, comm_->stream));
    }
  }
  void MarkBack() {
    if (ok()) Device(Dev().event_record(comm_->done, comm_->stream));
  }
  void WaitBack() {
    if (ok()) Device(Dev().event_synchronize(comm_->done));
  }

  // The caller's stream goes on after the copies back; in a group, the
  // buffers wait for GroupEnd.
  infiniCclResult_t Finish() {
    if (deferred_) {
      // The worker writes the ticket once this returns; the next call may
      // reuse the host buffers. Waited for after a failure too.
      const infiniCclResult_t synced = Dev().stream_synchronize(comm_->stream);
      Device(synced);
      return result_;
    }
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

  StagedComm* comm_;
  infiniCclStream_t caller_;
  const char* call_;
  std::lock_guard<std::mutex> lock_;
  bool deferred_ = false;
  infiniCclResult_t result_ = infiniCclSuccess;
  char* host_send_ = nullptr;
  char* host_recv_ = nullptr;
  std::unique_ptr<char[]> own_send_, own_recv_;
  std::vector<CopyBack> copies_;
};

using Body = std::function<infiniCclResult_t(Stage&)>;

// One staged call: deferred where it can be, else on this thread after the
// deferred ones.
infiniCclResult_t Run(infiniCclComm_t comm, infiniCclStream_t caller, const char* call, Body body);

}  // namespace infini::ccl::internal::staged
