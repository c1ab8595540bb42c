// The staged backend's communicator and what its entries share
// (staged_backend.cc: table and communicators; staged_collectives.cc: the
// collectives).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infini/ccl/plugin_abi.h"
#include "staged_shared_memory.h"
#include "staged_worker.h"

namespace infini::ccl::internal::staged {

struct Islands;

// The composed pair; set once by ComposeStaged.
const infiniCclPlugin_t& Transport();
const infiniCclPlugin_t& Device();

// The staged entries' last error on this thread (get_last_error).
infiniCclResult_t Fail(infiniCclResult_t result, std::string message);
const std::string& LastError();
// `result` of a call into `plugin`, its text kept as ours when it failed.
infiniCclResult_t FromPlugin(const infiniCclPlugin_t& plugin, infiniCclResult_t result,
                             const char* call);

// Host memory page-locked for Device()'s copies while this lives
// (host_register), so they run at the link's speed; where the device plugin
// has no such entry, or it fails, the memory stays pageable: the copies are
// slower, never wrong.
class RegisteredRange {
 public:
  RegisteredRange() = default;
  RegisteredRange(const RegisteredRange&) = delete;
  RegisteredRange& operator=(const RegisteredRange&) = delete;
  ~RegisteredRange() { Release(); }
  void Register(void* pointer, size_t bytes);  // releases the range held before
  void Release();

 private:
  void* pointer_ = nullptr;
};

// Host memory that grows and is never shrunk: a communicator's staging area,
// page-aligned and registered for the device's copies. Grown on the
// caller's thread only, with nothing in flight: registering page-locks
// memory, which waits for every stream of the device (CUDA's implicit
// synchronization).
class HostBuffer {
 public:
  char* Reserve(size_t bytes);  // contents are not kept
  size_t capacity() const { return bytes_; }

 private:
  struct Free {
    void operator()(char* data) const;
  };
  std::unique_ptr<char, Free> data_;
  RegisteredRange registered_;  // declared after data_: released before it is freed
  size_t bytes_ = 0;
};

// The points a staged call's device steps and host steps wait for
// (staged_call.h): the stream signals kInputCopied and kResultCopied, the
// host kSlotFree and kResultReady. Each carries a number that grows by one
// per signal point of the communicator (StagedComm::signals).
enum class Signal { kInputCopied, kResultCopied, kSlotFree, kResultReady };
constexpr int kSignals = 4;

struct StagedComm {
  infiniCclComm_t transport = nullptr;
  int device = 0;
  // Its own stream on `device`: the copies run there, ordered after the
  // caller's stream by `ready` and before it again by `done`.
  infiniCclStream_t stream = nullptr;
  infiniCclEvent_t ready = nullptr;
  infiniCclEvent_t done = nullptr;
  HostBuffer send, recv;
  // One call at a time enqueues (and, inline, uses the staging area).
  std::mutex calls;

  // Signal points given so far (under `calls`); a call's points wait for
  // no earlier than the last two, so two events per stream signal serve an
  // inline call.
  uint32_t signals = 0;
  infiniCclEvent_t signal_events[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  infiniCclEvent_t SignalEvent(Signal word, uint32_t value) {
    return signal_events[word == Signal::kResultCopied ? 1 : 0][value % 2];
  }
  // Proxied calls (staged_call.h): a host flag per Signal, and the worker
  // that runs the host steps. NULL words: every call is inline.
  uint32_t* words[kSignals] = {nullptr, nullptr, nullptr, nullptr};
  uint32_t* Word(Signal word) { return words[static_cast<int>(word)]; }
  bool proxied() const { return words[0] != nullptr; }
  // Whether another rank of the communicator uses this rank's device (same
  // host, device plugin and index): settled with the islands.
  bool device_shared = false;
  std::vector<infiniCclEvent_t> Events() const {
    return {ready,
            done,
            signal_events[0][0],
            signal_events[0][1],
            signal_events[1][0],
            signal_events[1][1]};
  }

  // Ranks of one host meet in a shared segment instead of the transport
  // (all_reduce of the types the host reduces): whether they do is settled
  // when the communicator is made.
  enum class SharedUse { kOn, kOff };
  SharedUse shared = SharedUse::kOff;
  std::unique_ptr<SharedSlots> slots;
  RegisteredRange slots_registered;   // after `slots`: released before the segment is unmapped
  int64_t sequence = 0;               // chunks through the slots so far
  int64_t timeout_ms = 0;             // a wait's deadline (config.timeout_ms); 0: none
  std::atomic<bool> aborting{false};  // comm_abort: waits in the slots end

  // Hierarchical all_reduce (staged_hierarchy.h): whether the ranks form
  // islands, settled when the communicator is made.
  enum class IslandUse { kOn, kOff };
  IslandUse islands_use = IslandUse::kOff;
  std::shared_ptr<Islands> islands;

  // The first failure of a proxied call or in the slots (the transport
  // keeps its own), for comm_get_async_error.
  void RecordAsyncError(infiniCclResult_t result, const std::string& message) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (async_error != infiniCclSuccess) return;
    async_message = message;
    async_error = result;
  }
  std::mutex error_mutex;
  infiniCclResult_t async_error = infiniCclSuccess;
  std::string async_message;

  std::unique_ptr<StagedWorker> worker;  // last: ends before what its jobs use
};

// Opens the communicator's shared segment, or finds the ranks cannot
// share one (comm.shared says which), and registers it with the device:
// collective over the transport. `call` names the caller in the failure.
infiniCclResult_t OpenSharedSlots(StagedComm& comm, const char* call);

// A communicator of `transport` staged on the calling thread's current
// device of Device(), its calls inline until StartProxy; on failure
// destroys nothing it did not make.
infiniCclResult_t MakeStagedComm(infiniCclComm_t transport, const infiniCclConfig_t* config,
                                 StagedComm** made);
// Proxies the communicator's calls where INFINI_CCL_STAGED_DEFER asks for
// it (1: always; unset or empty: unless its device is shared; 0: never) and
// the device plugin writes and waits on host flags. Fails only for a bad
// setting.
infiniCclResult_t StartProxy(StagedComm& comm);
// Returns once the host steps of every call proxied on `comm` have run (a
// call that runs on the caller's thread comes after them).
inline void DrainHostSteps(StagedComm& comm) {
  if (comm.worker) comm.worker->Drain();
}
// Waits for the copies in flight, then frees the device objects and the
// transport communicator (with comm_destroy, or comm_abort when `abort`).
infiniCclResult_t FreeStagedComm(StagedComm* comm, bool abort);

inline StagedComm* Of(infiniCclComm_t comm) { return reinterpret_cast<StagedComm*>(comm); }
inline infiniCclComm_t Handle(StagedComm* comm) { return reinterpret_cast<infiniCclComm_t>(comm); }

// The collectives (staged_collectives.cc), with the ABI's signatures.
infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            int root, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream);
infiniCclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                infiniCclStream_t stream);
infiniCclResult_t Send(const void* sendbuff, size_t count, DLDataType dtype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Recv(void* recvbuff, size_t count, DLDataType dtype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t AllToAll(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                           infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Barrier(infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t AllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                            void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                            DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t AllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, DLDataType dtype,
                             infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, size_t recvcount,
                                 DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
infiniCclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                         int root, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                          int root, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t GroupStart();
infiniCclResult_t GroupEnd();

}  // namespace infini::ccl::internal::staged
