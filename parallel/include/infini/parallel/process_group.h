// Collectives over a set of ranks (model: c10d's ProcessGroup and Work).
//
// Every operation gets a sequence number and is watched by the process's
// watchdog until it completes: one that does not finish within
// INFINI_CCL_TIMEOUT_S ends the process with kWatchdogExitCode after a line
// naming the operation, its bytes, the group, the sequence number and the
// rank. With INFINI_CCL_DEBUG=DETAIL, ranks compare every collective's
// signature through the store before running it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/parallel/watchdog.h"
#include "infini/parallel/work.h"

namespace infini::parallel {

namespace internal {
class BufferRegistry;
class GroupState;
}  // namespace internal

// A buffer registered with a group's communicator, and with each one that
// replaces it, until destroyed (ProcessGroup::RegisterBuffer). Destroy it
// before freeing the buffer. May outlive the group.
class GroupBufferRegistration {
 public:
  GroupBufferRegistration() = default;
  GroupBufferRegistration(std::weak_ptr<internal::BufferRegistry> registry, uint64_t id);
  ~GroupBufferRegistration();
  GroupBufferRegistration(GroupBufferRegistration&& other) noexcept;
  GroupBufferRegistration& operator=(GroupBufferRegistration&& other) noexcept;
  GroupBufferRegistration(const GroupBufferRegistration&) = delete;
  GroupBufferRegistration& operator=(const GroupBufferRegistration&) = delete;

 private:
  void Release();
  std::weak_ptr<internal::BufferRegistry> registry_;
  uint64_t id_ = 0;
};

// Made by Context::NewGroup (which is collective over the members); the
// group itself only issues work.
class ProcessGroup {
 public:
  ~ProcessGroup();  // destroys the communicator, or aborts it after a failure
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Takes over a group made by internal::CreateGroup (Context::NewGroup).
  explicit ProcessGroup(std::unique_ptr<internal::GroupState> state);

  const std::string& name() const;
  const std::vector<int>& members() const;  // global ranks, in group-rank order
  bool is_member() const;
  int rank() const;  // this rank's place in members(); -1 when not a member
  int size() const;
  // Global rank of group rank `group_rank`.
  int GlobalRankOf(int group_rank) const;
  // This rank's lane in a --trace_dir trace: the global rank it was launched
  // as, which a recovery's renumbering keeps (docs/tracing.md).
  int trace_lane() const;
  // The backend the group's communicator runs on, for buffers and streams
  // the group's work uses (a GradientReducer allocates its storage there).
  const std::shared_ptr<const ccl::Backend>& backend() const;

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

  // A group of the same members on another backend, for tensors of
  // `device_type` (Context::NewGroup adds one per other entry of a
  // cpu:gloo,cuda:nccl backend list). Each call then goes to the group of its
  // tensor's device type (the first tensor's; Barrier to this group's), with
  // the other group's default stream; a tensor of a type no group serves is
  // one ParallelUsageError.
  void AddDeviceGroup(DLDeviceType device_type, std::unique_ptr<ProcessGroup> group);

  // Registers `bytes` bytes at `data` (memory of backend()'s device) with
  // the group's communicator (ncclCommRegister), so collectives on it may
  // skip the backend's staging copies; again with every communicator that
  // replaces it (a shrink, a remake for joiners); deregistered before a
  // communicator is destroyed, and only forgotten by one that is revoked or
  // aborted (comm_abort frees them). Not collective. Registers nothing on a
  // backend without registration (Capabilities::register_buffers()) or on
  // a non-member; a failing registration is a warning, as collectives stay
  // correct without one.
  GroupBufferRegistration RegisterBuffer(void* data, size_t bytes);

 private:
  // This group, or the device group of `tensor`'s type; throws when none is.
  ProcessGroup* Route(const DLTensor& tensor, std::string_view op);

  std::unique_ptr<internal::GroupState> state_;
  std::vector<std::pair<DLDeviceType, std::unique_ptr<ProcessGroup>>> device_groups_;
};

}  // namespace infini::parallel
