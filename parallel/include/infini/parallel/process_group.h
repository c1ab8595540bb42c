// Collectives over a set of ranks (model: c10d's ProcessGroup and Work).
//
// Every operation gets a sequence number and is watched by the process's
// watchdog until it completes: one that does not finish within
// INFINI_CCL_TIMEOUT_S ends the process with kWatchdogExitCode after a line
// naming the operation, its bytes, the group, the sequence number and the
// rank. With INFINI_CCL_DEBUG=DETAIL, ranks compare every collective's
// signature through the store before running it.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::parallel {

class Context;
namespace internal {
struct WorkState;
class GroupState;
}  // namespace internal

// The exit status of a process ended by the watchdog (the convention of
// timeout(1): "it took too long").
inline constexpr int kWatchdogExitCode = 124;

// One operation in flight.
class Work {
 public:
  explicit Work(std::shared_ptr<internal::WorkState> state);
  // Done, or failed.
  bool IsCompleted() const;
  // Blocks the host until the operation is done; throws its error if it
  // failed. (A hung operation is the watchdog's business.)
  void Wait() const;
  // Like Wait(), but gives up after `timeout` and returns false.
  bool Wait(std::chrono::milliseconds timeout) const;
  // Makes future work on `compute_stream` wait for this operation, without
  // blocking the host.
  void WaitOnStream(const ccl::Stream& compute_stream) const;
  // The failure, or nullptr.
  std::exception_ptr error() const;
  // "all_reduce #3 on group 'world' (64 bytes, global rank 2)".
  std::string Describe() const;

 private:
  std::shared_ptr<internal::WorkState> state_;
};

class ProcessGroup {
 public:
  ~ProcessGroup();  // destroys the communicator, or aborts it after a failure
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  const std::string& name() const;
  const std::vector<int>& members() const;  // global ranks, in group-rank order
  bool is_member() const;
  int rank() const;  // this rank's place in members(); -1 when not a member
  int size() const;
  // Global rank of group rank `group_rank`.
  int GlobalRankOf(int group_rank) const;

  // Asynchronous forms return at once (host backends: once done); the
  // communication stream first waits for `compute_stream` (default: the
  // backend's default stream), so tensors written there are complete.
  // Roots and peers are group ranks.
  std::shared_ptr<Work> AllReduceAsync(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op,
                                       const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> BroadcastAsync(const DLTensor& send, const DLTensor& recv, int root,
                                       const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> ReduceAsync(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op,
                                    int root, const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> AllGatherAsync(const DLTensor& send, const DLTensor& recv,
                                       const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> ReduceScatterAsync(const DLTensor& send, const DLTensor& recv,
                                           ccl::ReduceOp op,
                                           const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> SendAsync(const DLTensor& send, int peer,
                                  const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> RecvAsync(const DLTensor& recv, int peer,
                                  const ccl::Stream& compute_stream = {});
  // Send to `send_peer` and receive from `recv_peer` together (one group),
  // as a ring exchange needs.
  std::shared_ptr<Work> SendRecvAsync(const DLTensor& send, int send_peer, const DLTensor& recv,
                                      int recv_peer, const ccl::Stream& compute_stream = {});
  std::shared_ptr<Work> BarrierAsync();

  // Synchronous forms: return when the result is in `recv`.
  void AllReduce(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op);
  void Broadcast(const DLTensor& send, const DLTensor& recv, int root);
  void Reduce(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op, int root);
  void AllGather(const DLTensor& send, const DLTensor& recv);
  void ReduceScatter(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op);
  void Send(const DLTensor& send, int peer);
  void Recv(const DLTensor& recv, int peer);
  void SendRecv(const DLTensor& send, int send_peer, const DLTensor& recv, int recv_peer);
  void Barrier();

  // Stops outstanding work; the group is unusable afterwards.
  void Abort();

 private:
  friend class Context;
  friend class GradientReducer;  // allocates on the group's backend
  explicit ProcessGroup(std::unique_ptr<internal::GroupState> state);
  std::unique_ptr<internal::GroupState> state_;
};

}  // namespace infini::parallel
