#include "infini/parallel/process_group.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>

#include "flight_recorder.h"
#include "group_state.h"
#include "infini/ccl/collectives.h"
#include "infini/ccl/device_backends.h"
#include "infini/ccl/dtype.h"
#include "infini/ccl/trace.h"
#include "infini/common/launch_env.h"
#include "infini/common/trace_format.h"
#include "infini/parallel/errors.h"
#include "infini/rendezvous/store.h"
#include "watchdog.h"
#include "work_state.h"

namespace infini::parallel {

namespace {

// "all_reduce(dtype=float32, count=16, op=sum)": what every rank must agree on.
std::string Signature(std::string_view op, const DLTensor& tensor, const std::string& extra) {
  return std::string(op) + "(dtype=" + ccl::DataTypeName(tensor.dtype) +
         ", count=" + std::to_string(ccl::NumElements(tensor)) + extra + ")";
}

std::string OpText(ccl::ReduceOp op) { return ", op=" + std::string(ccl::ReduceOpName(op)); }
std::string RootText(int root) { return ", root=" + std::to_string(root); }

void RequireMember(const internal::GroupState& group, std::string_view op) {
  if (group.group_rank >= 0) return;
  throw ParallelUsageError(
      std::string(op) + " on process group '" + group.name + "': global rank " +
      std::to_string(group.environment.rank.global_rank()) +
      " is not a member (members: " + internal::MemberList(group.members) + ")");
}

// Debug mode: every member publishes its call's signature under the
// collective's number and compares it with every other member's.
void CompareSignatures(internal::GroupState& group, const std::string& signature) {
  const uint64_t number = group.next_collective++;
  rendezvous::Store& store = *group.environment.store;
  const std::string prefix = group.store_key + "/debug/";
  const std::string here = prefix + std::to_string(number) + "/";
  store.Set(here + std::to_string(group.group_rank), signature);
  for (int other = 0; other < static_cast<int>(group.members.size()); ++other) {
    if (other == group.group_rank) continue;
    const std::string theirs = store.Get(here + std::to_string(other));
    if (theirs != signature) {
      throw ParallelUsageError("collective mismatch on process group '" + group.name +
                               "' at collective #" + std::to_string(number) + ": global rank " +
                               std::to_string(group.environment.rank.global_rank()) + " called " +
                               signature + " but global rank " +
                               std::to_string(group.members[other]) + " called " + theirs);
    }
  }
  // Every member has now reached this collective, so all have finished
  // reading the previous one: this rank's key of it can go.
  if (number > 0) {
    store.DeleteKey(prefix + std::to_string(number - 1) + "/" + std::to_string(group.group_rank));
  }
}

// What the flight recorder keeps of an operation's buffer.
struct Payload {
  size_t bytes = 0;
  DLDataType dtype{};
  int64_t count = 0;
};

Payload PayloadOf(const DLTensor& tensor) {
  const int64_t count = ccl::NumElements(tensor);
  return {ccl::ElementBytes(tensor.dtype) * static_cast<size_t>(count), tensor.dtype, count};
}

// `op` is ccl::CollectiveName's text (or internal::kSendRecvOp): static.
// `signature(op)` is called only in debug mode: strings stay off the hot
// path.
template <typename Signature, typename Issue>
std::shared_ptr<Work> Run(internal::GroupState& group, std::string_view op, Payload payload,
                          Signature signature, const ccl::Stream& compute_stream, Issue issue) {
  RequireMember(group, op);
  if (*group.revoked_for_loss) {
    throw PeerLostError(std::string(op) + " on process group '" + group.name +
                        "': a rank of the run was lost (--on_failure=shrink); call "
                        "Context::RecoverFromLoss");
  }
  auto work = std::make_shared<internal::WorkState>();
  work->op = op;
  work->bytes = payload.bytes;
  work->group = group.name;
  work->sequence = group.next_sequence++;
  work->global_rank = group.environment.rank.global_rank();
  work->lane_rank = group.environment.rank.launch_global_rank();
  work->timeout = group.environment.timeout;
  work->owner = &group;
  if (group.environment.shrink_on_failure) work->revoked_for_loss = group.revoked_for_loss;
  work->flight_id = internal::FlightRecorder::Instance().Record(
      group.flight_group, work->sequence, op, payload.dtype, payload.count, work->global_rank);
  // Registered before the backend is called: host backends block inside it.
  internal::Watchdog::Instance().AddWork(work);
  try {
    if constexpr (!std::is_same_v<Signature, std::nullptr_t>) {
      if (group.environment.debug == DebugLevel::kDetail) {
        CompareSignatures(group, signature(op));
      }
    }
    const bool traced = ccl::trace::Enabled();
    const int64_t trace_begin = traced ? ccl::trace::NowNs() : 0;
    if (traced) ccl::trace::LabelCommunicator(group.comm, group.name, work->lane_rank);
    group.ready_event->Record(compute_stream);
    group.comm_stream->WaitEvent(*group.ready_event);
    work->Started();
    issue(*group.comm_stream);
    ccl::Event end = group.events->Take();
    end.Record(*group.comm_stream);
    work->Enqueued(std::move(end), group.events);
    if (traced) {
      ccl::trace::RecordSpan(work->lane_rank, ccl::trace::Category::kGroup, op.data(), group.name,
                             static_cast<int64_t>(work->sequence), payload.bytes, trace_begin,
                             ccl::trace::NowNs());
    }
  } catch (const ccl::Error& error) {
    ccl::Error described(error.code(), work->Describe() + ": " + error.what());
    work->Failed(std::make_exception_ptr(described));
    internal::Watchdog::Instance().RemoveWork(work.get());
    if (group.environment.shrink_on_failure) {
      // A dead peer, or a revoke at its notice: the program recovers
      // (Context::RecoverFromLoss), which waits for the notice if the
      // collective saw the loss first.
      throw PeerLostError(std::string(described.what()) +
                          " (--on_failure=shrink: a rank may have been lost; call "
                          "Context::RecoverFromLoss)");
    }
    throw described;
  } catch (...) {
    work->Failed(std::current_exception());
    internal::Watchdog::Instance().RemoveWork(work.get());
    throw;
  }
  return std::make_shared<Work>(work);
}

constexpr int kRounds = 5;
// The launcher answers at once; a slower answer means there is none.
constexpr std::chrono::milliseconds kAnswerTimeout{500};

// The trace's clock offset of a rank to the store's host (docs/tracing.md,
// "Clocks"), NTP's way: questions over the store that infini_run's node-0
// launcher answers with its clock; the quickest round trip's answer against
// its midpoint is the offset. Once per trace lane (launch rank); without
// the launcher's store, or without an answer, "not measured". Never throws.
void EstimateTraceClockOnce(rendezvous::Store& store, int global_rank) {
  if (!ccl::trace::Enabled()) return;
  static std::mutex mutex;
  static std::set<int> estimated;
  {
    std::lock_guard lock(mutex);
    if (!estimated.insert(global_rank).second) return;
  }
  // Only infini_run's store has someone answering.
  if (std::getenv(env::kStoreAddr) == nullptr) {
    ccl::trace::RecordClockOffset(global_rank, 0, -1, 0);
    return;
  }
  int64_t best_rtt = -1;
  int64_t best_offset = 0;
  int rounds = 0;
  try {
    for (; rounds < kRounds; ++rounds) {
      const int64_t number = store.Add(trace_format::kClockTicketKey, 1);
      const std::string answer_key = trace_format::ClockAnswerKey(number);
      const int64_t sent = ccl::trace::NowNs();
      store.Set(trace_format::ClockAskKey(number), "");
      store.Wait({answer_key}, kAnswerTimeout);
      const std::string answer = store.Get(answer_key);
      const int64_t received = ccl::trace::NowNs();
      const int64_t host_clock = std::strtoll(answer.c_str(), nullptr, 10);
      if (best_rtt < 0 || received - sent < best_rtt) {
        best_rtt = received - sent;
        best_offset = host_clock - (sent + (received - sent) / 2);
      }
      store.DeleteKey(answer_key);
    }
  } catch (const std::exception&) {
    // No answer (a store without the launcher's answerer) or a store error:
    // what was measured stands, else "not measured".
  }
  ccl::trace::RecordClockOffset(global_rank, best_offset, best_rtt, rounds);
}

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<internal::GroupState> state) : state_(std::move(state)) {
  if (ccl::trace::Enabled() && state_->environment.store != nullptr) {
    EstimateTraceClockOnce(*state_->environment.store,
                           state_->environment.rank.launch_global_rank());
  }
}

ProcessGroup::~ProcessGroup() = default;

const std::string& ProcessGroup::name() const { return state_->name; }
const std::vector<int>& ProcessGroup::members() const { return state_->members; }
bool ProcessGroup::is_member() const { return state_->group_rank >= 0; }
int ProcessGroup::rank() const { return state_->group_rank; }
int ProcessGroup::size() const { return static_cast<int>(state_->members.size()); }
int ProcessGroup::trace_lane() const { return state_->TraceLane(); }
const std::shared_ptr<const ccl::Backend>& ProcessGroup::backend() const {
  return state_->environment.backend;
}

int ProcessGroup::GlobalRankOf(int group_rank) const {
  if (group_rank < 0 || group_rank >= size()) {
    throw ParallelUsageError("process group '" + name() + "': group rank " +
                             std::to_string(group_rank) + " is outside 0.." +
                             std::to_string(size() - 1));
  }
  return state_->members[group_rank];
}

std::shared_ptr<Work> ProcessGroup::AllReduceAsync(const DLTensor& send, const DLTensor& recv,
                                                   ccl::ReduceOp op,
                                                   const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(send, ccl::CollectiveName(ccl::Collective::kAllReduce));
      other != this) {
    return other->AllReduceAsync(send, recv, op);
  }
  return Run(
      *state_, ccl::CollectiveName(ccl::Collective::kAllReduce), PayloadOf(send),
      [&](std::string_view name) { return Signature(name, send, OpText(op)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.AllReduce(send, recv, op, stream); });
}

std::shared_ptr<Work> ProcessGroup::BroadcastAsync(const DLTensor& send, const DLTensor& recv,
                                                   int root, const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(recv, ccl::CollectiveName(ccl::Collective::kBroadcast));
      other != this) {
    return other->BroadcastAsync(send, recv, root);
  }
  return Run(
      *state_, ccl::CollectiveName(ccl::Collective::kBroadcast), PayloadOf(recv),
      [&](std::string_view name) { return Signature(name, recv, RootText(root)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.Broadcast(send, recv, root, stream); });
}

std::shared_ptr<Work> ProcessGroup::ReduceAsync(const DLTensor& send, const DLTensor& recv,
                                                ccl::ReduceOp op, int root,
                                                const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(send, ccl::CollectiveName(ccl::Collective::kReduce));
      other != this) {
    return other->ReduceAsync(send, recv, op, root);
  }
  return Run(
      *state_, ccl::CollectiveName(ccl::Collective::kReduce), PayloadOf(send),
      [&](std::string_view name) { return Signature(name, send, OpText(op) + RootText(root)); },
      compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.Reduce(send, recv, op, root, stream); });
}

std::shared_ptr<Work> ProcessGroup::AllGatherAsync(const DLTensor& send, const DLTensor& recv,
                                                   const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(send, ccl::CollectiveName(ccl::Collective::kAllGather));
      other != this) {
    return other->AllGatherAsync(send, recv);
  }
  return Run(
      *state_, ccl::CollectiveName(ccl::Collective::kAllGather), PayloadOf(send),
      [&](std::string_view name) { return Signature(name, send, ""); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.AllGather(send, recv, stream); });
}

std::shared_ptr<Work> ProcessGroup::ReduceScatterAsync(const DLTensor& send, const DLTensor& recv,
                                                       ccl::ReduceOp op,
                                                       const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(send, ccl::CollectiveName(ccl::Collective::kReduceScatter));
      other != this) {
    return other->ReduceScatterAsync(send, recv, op);
  }
  return Run(
      *state_, ccl::CollectiveName(ccl::Collective::kReduceScatter), PayloadOf(send),
      [&](std::string_view name) { return Signature(name, recv, OpText(op)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.ReduceScatter(send, recv, op, stream); });
}

// Point-to-point calls involve two ranks, not the group: no signature check.
std::shared_ptr<Work> ProcessGroup::SendAsync(const DLTensor& send, int peer,
                                              const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(send, ccl::CollectiveName(ccl::Collective::kSend));
      other != this) {
    return other->SendAsync(send, peer);
  }
  return Run(*state_, ccl::CollectiveName(ccl::Collective::kSend), PayloadOf(send), nullptr,
             compute_stream,
             [&](const ccl::Stream& stream) { state_->comm.Send(send, peer, stream); });
}

std::shared_ptr<Work> ProcessGroup::RecvAsync(const DLTensor& recv, int peer,
                                              const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(recv, ccl::CollectiveName(ccl::Collective::kRecv));
      other != this) {
    return other->RecvAsync(recv, peer);
  }
  return Run(*state_, ccl::CollectiveName(ccl::Collective::kRecv), PayloadOf(recv), nullptr,
             compute_stream,
             [&](const ccl::Stream& stream) { state_->comm.Recv(recv, peer, stream); });
}

std::shared_ptr<Work> ProcessGroup::SendRecvAsync(const DLTensor& send, int send_peer,
                                                  const DLTensor& recv, int recv_peer,
                                                  const ccl::Stream& compute_stream) {
  if (ProcessGroup* other = Route(send, internal::kSendRecvOp); other != this) {
    return other->SendRecvAsync(send, send_peer, recv, recv_peer);
  }
  Payload payload = PayloadOf(send);
  payload.bytes += PayloadOf(recv).bytes;
  return Run(*state_, internal::kSendRecvOp, payload, nullptr, compute_stream,
             [&](const ccl::Stream& stream) {
               const auto& backend = state_->environment.backend;
               if (!backend->capabilities().group()) {
                 // No group semantics: even ranks send first, odd ranks
                 // receive first, so blocking point-to-point calls along a
                 // ring or a pair always find their partner.
                 if (state_->group_rank % 2 == 0) {
                   state_->comm.Send(send, send_peer, stream);
                   state_->comm.Recv(recv, recv_peer, stream);
                 } else {
                   state_->comm.Recv(recv, recv_peer, stream);
                   state_->comm.Send(send, send_peer, stream);
                 }
                 return;
               }
               backend->GroupStart();
               try {
                 state_->comm.Send(send, send_peer, stream);
                 state_->comm.Recv(recv, recv_peer, stream);
               } catch (...) {
                 try {
                   backend->GroupEnd();
                 } catch (...) {
                 }
                 throw;
               }
               backend->GroupEnd();
             });
}

std::shared_ptr<Work> ProcessGroup::BarrierAsync() {
  return Run(
      *state_, ccl::CollectiveName(ccl::Collective::kBarrier), Payload{},
      [](std::string_view name) { return std::string(name) + "()"; }, ccl::Stream(),
      [&](const ccl::Stream& stream) { state_->comm.Barrier(stream); });
}

namespace {

// A blocking call's wait, as a span of its own while tracing.
void WaitTraced(const internal::GroupState& group, const Work& work) {
  if (!ccl::trace::Enabled()) return work.Wait();
  const int64_t begin = ccl::trace::NowNs();
  work.Wait();
  ccl::trace::RecordSpan(group.environment.rank.launch_global_rank(), ccl::trace::Category::kWait,
                         "wait", group.name, -1, 0, begin, ccl::trace::NowNs());
}

}  // namespace

void ProcessGroup::AllReduce(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op) {
  WaitTraced(*state_, *AllReduceAsync(send, recv, op));
}
void ProcessGroup::Broadcast(const DLTensor& send, const DLTensor& recv, int root) {
  WaitTraced(*state_, *BroadcastAsync(send, recv, root));
}
void ProcessGroup::Reduce(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op, int root) {
  WaitTraced(*state_, *ReduceAsync(send, recv, op, root));
}
void ProcessGroup::AllGather(const DLTensor& send, const DLTensor& recv) {
  WaitTraced(*state_, *AllGatherAsync(send, recv));
}
void ProcessGroup::ReduceScatter(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op) {
  WaitTraced(*state_, *ReduceScatterAsync(send, recv, op));
}
void ProcessGroup::Send(const DLTensor& send, int peer) {
  WaitTraced(*state_, *SendAsync(send, peer));
}
void ProcessGroup::Recv(const DLTensor& recv, int peer) {
  WaitTraced(*state_, *RecvAsync(recv, peer));
}
void ProcessGroup::SendRecv(const DLTensor& send, int send_peer, const DLTensor& recv,
                            int recv_peer) {
  WaitTraced(*state_, *SendRecvAsync(send, send_peer, recv, recv_peer));
}
void ProcessGroup::Barrier() { WaitTraced(*state_, *BarrierAsync()); }

void ProcessGroup::Abort() {
  state_->AbortOnce("ProcessGroup::Abort");
  for (auto& [type, group] : device_groups_) group->Abort();
}

void ProcessGroup::AddDeviceGroup(DLDeviceType device_type, std::unique_ptr<ProcessGroup> group) {
  device_groups_.emplace_back(device_type, std::move(group));
}

ProcessGroup* ProcessGroup::Route(const DLTensor& tensor, std::string_view op) {
  const DLDeviceType type = tensor.device.device_type;
  if (device_groups_.empty() || type == state_->environment.backend->info().device_type) {
    return this;
  }
  std::string served = ccl::DeviceTypeName(state_->environment.backend->info().device_type);
  for (auto& [device_type, group] : device_groups_) {
    if (device_type == type) return group.get();
    served += ", " + ccl::DeviceTypeName(device_type);
  }
  throw ParallelUsageError(std::string(op) + " on process group '" + state_->name +
                           "': no backend for tensors on " + ccl::DeviceTypeName(type) +
                           " (the group serves " + served +
                           "): expected a TYPE:BACKEND entry for it in INFINI_CCL_BACKEND");
}

GroupBufferRegistration ProcessGroup::RegisterBuffer(void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->abort_mutex);
  const uint64_t id = state_->registrations->Add(state_->comm, data, bytes);
  return GroupBufferRegistration(state_->registrations, id);
}

GroupBufferRegistration::GroupBufferRegistration(std::weak_ptr<internal::BufferRegistry> registry,
                                                 uint64_t id)
    : registry_(std::move(registry)), id_(id) {}

GroupBufferRegistration::~GroupBufferRegistration() { Release(); }

GroupBufferRegistration::GroupBufferRegistration(GroupBufferRegistration&& other) noexcept
    : registry_(std::move(other.registry_)), id_(std::exchange(other.id_, 0)) {}

GroupBufferRegistration& GroupBufferRegistration::operator=(
    GroupBufferRegistration&& other) noexcept {
  if (this != &other) {
    Release();
    registry_ = std::move(other.registry_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void GroupBufferRegistration::Release() {
  if (id_ == 0) return;
  // A group already gone deregistered everything before its communicator.
  if (auto registry = registry_.lock()) registry->Remove(id_);
  id_ = 0;
}

}  // namespace infini::parallel
