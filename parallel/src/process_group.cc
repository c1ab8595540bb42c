#include "infini/parallel/process_group.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>

#include "flight_recorder.h"
#include "group_state.h"
#include "infini/ccl/dtype.h"
#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/logging.h"
#include "infini/parallel/store_bootstrap.h"
#include "infini/rendezvous/store.h"
#include "local_init.h"

namespace infini::parallel {
namespace internal {
namespace {

// Extra time a backend's own host-side timeout gets beyond ours, so that the
// watchdog (which names the collective) reports first.
constexpr std::chrono::seconds kBackendTimeoutMargin{30};

std::string MemberList(const std::vector<int>& members) {
  std::string text;
  for (size_t i = 0; i < members.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(members[i]);
  }
  return text;
}

// FNV-1a of the member list: groups that share a name but not their members
// (each TP group called "tp", say) never share keys.
std::string MembersDigest(const std::vector<int>& members) {
  uint64_t hash = 1469598103934665603ULL;
  for (int member : members) {
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= static_cast<uint64_t>((static_cast<uint32_t>(member) >> (8 * byte)) & 0xff);
      hash *= 1099511628211ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return std::string(text, 8);
}

void ValidateMembers(const Context& context, const std::string& name,
                     const std::vector<int>& members) {
  if (name.empty() || name.find('/') != std::string::npos) {
    throw ParallelUsageError("process group name '" + OneLine(name) +
                             "': expected a non-empty name without '/'");
  }
  const int world_size = context.rank().world_size();
  std::set<int> seen;
  for (int member : members) {
    if (member < 0 || member >= world_size) {
      throw ParallelUsageError("process group '" + name + "': member " + std::to_string(member) +
                               " is outside the world's ranks 0.." +
                               std::to_string(world_size - 1));
    }
    if (!seen.insert(member).second) {
      throw ParallelUsageError("process group '" + name + "': member " + std::to_string(member) +
                               " is listed twice in [" + MemberList(members) + "]");
    }
  }
  if (members.empty()) {
    throw ParallelUsageError("process group '" + name + "': expected at least one member");
  }
}

ccl::UniqueId ShareUniqueId(GroupState& group, std::shared_ptr<ccl::BootstrapStore> bootstrap) {
  rendezvous::Store& store = group.context->store();
  const std::string key = group.store_key + "/unique_id";
  if (group.group_rank == 0) {
    ccl::UniqueId id = group.context->backend()->GetUniqueId(std::move(bootstrap));
    store.Set(key, id.ToBytes());
    return id;
  }
  try {
    return ccl::UniqueId::FromBytes(store.Get(key));
  } catch (const rendezvous::StoreTimeoutError&) {
    throw ParallelError("process group '" + group.name + "': global rank " +
                        std::to_string(group.context->rank().global_rank()) +
                        " timed out waiting for the unique id of the group's root, global rank " +
                        std::to_string(group.members[0]) + " (is it running and making '" +
                        group.name + "' too?)");
  }
}

std::string ArrivalKey(const std::string& store_key, int group_rank) {
  return store_key + "/arrived/" + std::to_string(group_rank);
}

// Why a group's init is overdue: the members that never said they arrived,
// or, when all did, the backend's init itself. Asks the store on its own
// connection (the rank's may be blocked inside the init).
std::string DiagnoseInit(const std::weak_ptr<Context>& weak_context, const std::string& name,
                         const std::string& store_key, const std::vector<int>& members) {
  auto context = weak_context.lock();
  if (context == nullptr) return "the rank's context is gone";
  std::shared_ptr<rendezvous::Store> store = context->ConnectStore();
  std::vector<int> absent;
  for (size_t i = 0; i < members.size(); ++i) {
    if (!store->Check({ArrivalKey(store_key, static_cast<int>(i))})) absent.push_back(members[i]);
  }
  if (absent.empty()) {
    return "every member of group '" + name + "' arrived at its init; backend '" +
           context->backend()->info().name + "' did not finish making the communicator";
  }
  constexpr size_t kNamed = 16;
  std::string list;
  for (size_t i = 0; i < absent.size() && i < kNamed; ++i) {
    list += (i == 0 ? "" : ", ") + std::to_string(absent[i]);
  }
  if (absent.size() > kNamed) list += ", ... (" + std::to_string(absent.size()) + " in all)";
  return std::to_string(absent.size()) + " of " + std::to_string(members.size()) +
         " members of group '" + name + "' never arrived at its init: global rank" +
         (absent.size() == 1 ? " " : "s ") + list + " (not started, stuck before it, or dead)";
}

// Members of the group that are thread ranks of this process.
int LocalMembers(const Context& context, const std::vector<int>& members) {
  const int threads = context.rank().threads_per_process();
  const int process = context.rank().global_proc_rank();
  int local = 0;
  for (int member : members) local += member / threads == process ? 1 : 0;
  return local;
}

}  // namespace

uint64_t NextGeneration(int global_rank, const std::string& key) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, uint64_t> generations;
  std::lock_guard<std::mutex> lock(mutex);
  return generations[{global_rank, key}]++;
}

GroupState::~GroupState() {
  if (watched) Watchdog::Instance().RemoveGroup(this);
  if (!comm.valid()) return;
  // After a failure, a peer may never answer: destroy would wait forever.
  bool failed = aborted.load();
  if (!failed) {
    const infiniCclResult_t error = AsyncError();
    failed = error != infiniCclSuccess && error != infiniCclInProgress;
  }
  try {
    if (failed) {
      AbortOnce();
    } else {
      std::lock_guard<std::mutex> lock(abort_mutex);
      comm.Destroy();
    }
  } catch (...) {
    // A destructor cannot report; the process is ending or moving on.
  }
}

infiniCclResult_t GroupState::AsyncError() {
  if (!comm.valid()) return infiniCclSuccess;
  try {
    return comm.GetAsyncError();
  } catch (const ccl::Error&) {
    return infiniCclSuccess;
  }
}

void GroupState::AbortFromWatchdog() { AbortOnce(); }

void GroupState::ReportHang(const std::function<void(const std::string&)>& print) {
  HangScene scene;
  scene.store_key = store_key;
  scene.name = name;
  scene.members = members;
  scene.threads_per_process = context->rank().threads_per_process();
  scene.proc_rank = context->rank().global_proc_rank();
  // Its own connection: the rank's may be inside a call on another thread.
  std::shared_ptr<rendezvous::Store> store = context->ConnectStore();
  store->set_timeout(kFlightGatherWindow);
  GatherHangReport(*store, scene, kFlightGatherWindow, print);
}

void GroupState::AbortOnce() {
  std::lock_guard<std::mutex> lock(abort_mutex);
  aborted = true;
  if (comm.valid()) comm.Abort();
}

std::unique_ptr<GroupState> CreateGroup(std::shared_ptr<Context> context, const std::string& name,
                                        std::vector<int> members) {
  ValidateMembers(*context, name, members);
  auto group = std::make_unique<GroupState>();
  group->context = context;
  group->name = name;
  group->members = std::move(members);
  const int global_rank = context->rank().global_rank();
  auto position = std::find(group->members.begin(), group->members.end(), global_rank);
  if (position == group->members.end()) return group;  // not a member: nothing to join
  group->group_rank = static_cast<int>(position - group->members.begin());

  const std::string key = name + "." + MembersDigest(group->members);
  group->store_key = "pg/" + key + "/" + std::to_string(NextGeneration(global_rank, key));
  group->flight_group =
      FlightRecorder::Instance().RegisterGroup(group->store_key, name, group->members);

  // Joining waits for every member; the watchdog sees that wait too.
  auto init = std::make_shared<WorkState>();
  init->op = "init";
  init->group = name;
  init->global_rank = global_rank;
  init->timeout = context->settings().timeout;
  init->diagnose = [weak = std::weak_ptr<Context>(context), name, store_key = group->store_key,
                    members = group->members] {
    return DiagnoseInit(weak, name, store_key, members);
  };
  Watchdog::Instance().AddWork(init);
  try {
    // Said before anything that waits, so a timed-out init can name who
    // never came.
    context->store().Set(ArrivalKey(group->store_key, group->group_rank), "");
    // The plugin may use the run's store under the group's own prefix.
    std::weak_ptr<Context> weak_context = context;
    auto bootstrap = std::make_shared<StoreBootstrap>(
        context->key_namespace() + "/" + group->store_key + "/plugin/", [weak_context] {
          auto owner = weak_context.lock();
          if (owner == nullptr) {
            throw rendezvous::StoreError("the rank's context is gone");
          }
          return owner->ConnectStore();
        });
    const ccl::UniqueId id = ShareUniqueId(*group, bootstrap);
    ccl::CommConfig config;
    config.name = name;
    config.timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            context->settings().timeout + kBackendTimeoutMargin)
                            .count();
    config.allow_device_sharing = context->shares_device();
    const auto& backend = context->backend();
    const int group_size = static_cast<int>(group->members.size());
    const int local_members = LocalMembers(*context, group->members);
    const ccl::Capabilities& capabilities = backend->capabilities();
    if (local_members > 1 &&
        (capabilities.multi_device_init() || !capabilities.concurrent_init())) {
      // Several thread ranks of this process: one multi-device init for all.
      group->comm = JoinLocalInit(
          group->store_key, local_members, group->group_rank, context->device_index(),
          [&](const std::vector<int>& ranks, const std::vector<int>& devices) {
            return backend->CommInitRanks(group_size, id, ranks, devices, config, bootstrap);
          });
      backend->SetDevice(context->device_index());
    } else {
      group->comm = backend->CommInitRank(group_size, id, group->group_rank, config, bootstrap);
    }
    group->comm_stream.emplace(backend);
    group->ready_event.emplace(backend);
    group->events = std::make_shared<EventPool>(backend);
  } catch (...) {
    init->Failed(std::current_exception());
    Watchdog::Instance().RemoveWork(init.get());
    throw;
  }
  init->Complete();
  if (context->settings().debug != DebugLevel::kOff) {
    INFINI_LOG(INFO) << "process group '" << name << "' [" << MemberList(group->members)
                     << "]: group rank " << group->group_rank << ", keys "
                     << context->key_namespace() << "/" << group->store_key;
  }
  Watchdog::Instance().AddGroup(group.get());
  group->watched = true;
  return group;
}

}  // namespace internal

namespace {

// "all_reduce(dtype=float32, count=16, op=sum)": what every rank must agree on.
std::string Signature(const std::string& op, const DLTensor& tensor, const std::string& extra) {
  return op + "(dtype=" + ccl::DataTypeName(tensor.dtype) +
         ", count=" + std::to_string(ccl::NumElements(tensor)) + extra + ")";
}

std::string OpText(ccl::ReduceOp op) { return ", op=" + std::string(ccl::ReduceOpName(op)); }
std::string RootText(int root) { return ", root=" + std::to_string(root); }

void RequireMember(const internal::GroupState& group, const std::string& op) {
  if (group.group_rank >= 0) return;
  throw ParallelUsageError(op + " on process group '" + group.name + "': global rank " +
                           std::to_string(group.context->rank().global_rank()) +
                           " is not a member (members: " + internal::MemberList(group.members) +
                           ")");
}

// Debug mode: every member publishes its call's signature under the
// collective's number and compares it with every other member's.
void CompareSignatures(internal::GroupState& group, const std::string& signature) {
  const uint64_t number = group.next_collective++;
  rendezvous::Store& store = group.context->store();
  const std::string prefix = group.store_key + "/debug/";
  const std::string here = prefix + std::to_string(number) + "/";
  store.Set(here + std::to_string(group.group_rank), signature);
  for (int other = 0; other < static_cast<int>(group.members.size()); ++other) {
    if (other == group.group_rank) continue;
    const std::string theirs = store.Get(here + std::to_string(other));
    if (theirs != signature) {
      throw ParallelUsageError("collective mismatch on process group '" + group.name +
                               "' at collective #" + std::to_string(number) + ": global rank " +
                               std::to_string(group.context->rank().global_rank()) + " called " +
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

// `op` is a static string. `signature` is called only in debug mode:
// strings stay off the hot path.
template <typename Signature, typename Issue>
std::shared_ptr<Work> Run(internal::GroupState& group, const char* op, Payload payload,
                          Signature signature, const ccl::Stream& compute_stream, Issue issue) {
  RequireMember(group, op);
  auto work = std::make_shared<internal::WorkState>();
  work->op = op;
  work->bytes = payload.bytes;
  work->group = group.name;
  work->sequence = group.next_sequence++;
  work->global_rank = group.context->rank().global_rank();
  work->timeout = group.context->settings().timeout;
  work->owner = &group;
  work->flight_id = internal::FlightRecorder::Instance().Record(
      group.flight_group, work->sequence, op, payload.dtype, payload.count, work->global_rank);
  // Registered before the backend is called: host backends block inside it.
  internal::Watchdog::Instance().AddWork(work);
  try {
    if constexpr (!std::is_same_v<Signature, std::nullptr_t>) {
      if (group.context->settings().debug == DebugLevel::kDetail) {
        CompareSignatures(group, signature());
      }
    }
    group.ready_event->Record(compute_stream);
    group.comm_stream->WaitEvent(*group.ready_event);
    work->Started();
    issue(*group.comm_stream);
    ccl::Event end = group.events->Take();
    end.Record(*group.comm_stream);
    work->Enqueued(std::move(end), group.events);
  } catch (const ccl::Error& error) {
    ccl::Error described(error.code(), work->Describe() + ": " + error.what());
    work->Failed(std::make_exception_ptr(described));
    internal::Watchdog::Instance().RemoveWork(work.get());
    throw described;
  } catch (...) {
    work->Failed(std::current_exception());
    internal::Watchdog::Instance().RemoveWork(work.get());
    throw;
  }
  return std::make_shared<Work>(work);
}

}  // namespace

Work::Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}

bool Work::IsCompleted() const { return state_->Poll(); }

void Work::Wait() const {
  state_->Synchronize();
  if (!state_->Poll()) Wait(std::chrono::milliseconds::max());  // not enqueued: poll
  if (auto error = state_->error()) std::rethrow_exception(error);
}

bool Work::Wait(std::chrono::milliseconds timeout) const {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  while (!state_->Poll()) {
    if (timeout != std::chrono::milliseconds::max() &&
        std::chrono::steady_clock::now() - start >= timeout) {
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
  if (auto error = state_->error()) std::rethrow_exception(error);
  return true;
}

void Work::WaitOnStream(const ccl::Stream& compute_stream) const {
  state_->MakeStreamWait(compute_stream);
}

std::exception_ptr Work::error() const { return state_->error(); }

std::string Work::Describe() const { return state_->Describe(); }

ProcessGroup::ProcessGroup(std::unique_ptr<internal::GroupState> state)
    : state_(std::move(state)) {}

ProcessGroup::~ProcessGroup() = default;

const std::string& ProcessGroup::name() const { return state_->name; }
const std::vector<int>& ProcessGroup::members() const { return state_->members; }
bool ProcessGroup::is_member() const { return state_->group_rank >= 0; }
int ProcessGroup::rank() const { return state_->group_rank; }
int ProcessGroup::size() const { return static_cast<int>(state_->members.size()); }

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
  return Run(
      *state_, "all_reduce", PayloadOf(send),
      [&] { return Signature("all_reduce", send, OpText(op)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.AllReduce(send, recv, op, stream); });
}

std::shared_ptr<Work> ProcessGroup::BroadcastAsync(const DLTensor& send, const DLTensor& recv,
                                                   int root, const ccl::Stream& compute_stream) {
  return Run(
      *state_, "broadcast", PayloadOf(recv),
      [&] { return Signature("broadcast", recv, RootText(root)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.Broadcast(send, recv, root, stream); });
}

std::shared_ptr<Work> ProcessGroup::ReduceAsync(const DLTensor& send, const DLTensor& recv,
                                                ccl::ReduceOp op, int root,
                                                const ccl::Stream& compute_stream) {
  return Run(
      *state_, "reduce", PayloadOf(send),
      [&] { return Signature("reduce", send, OpText(op) + RootText(root)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.Reduce(send, recv, op, root, stream); });
}

std::shared_ptr<Work> ProcessGroup::AllGatherAsync(const DLTensor& send, const DLTensor& recv,
                                                   const ccl::Stream& compute_stream) {
  return Run(
      *state_, "all_gather", PayloadOf(send), [&] { return Signature("all_gather", send, ""); },
      compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.AllGather(send, recv, stream); });
}

std::shared_ptr<Work> ProcessGroup::ReduceScatterAsync(const DLTensor& send, const DLTensor& recv,
                                                       ccl::ReduceOp op,
                                                       const ccl::Stream& compute_stream) {
  return Run(
      *state_, "reduce_scatter", PayloadOf(send),
      [&] { return Signature("reduce_scatter", recv, OpText(op)); }, compute_stream,
      [&](const ccl::Stream& stream) { state_->comm.ReduceScatter(send, recv, op, stream); });
}

// Point-to-point calls involve two ranks, not the group: no signature check.
std::shared_ptr<Work> ProcessGroup::SendAsync(const DLTensor& send, int peer,
                                              const ccl::Stream& compute_stream) {
  return Run(*state_, "send", PayloadOf(send), nullptr, compute_stream,
             [&](const ccl::Stream& stream) { state_->comm.Send(send, peer, stream); });
}

std::shared_ptr<Work> ProcessGroup::RecvAsync(const DLTensor& recv, int peer,
                                              const ccl::Stream& compute_stream) {
  return Run(*state_, "recv", PayloadOf(recv), nullptr, compute_stream,
             [&](const ccl::Stream& stream) { state_->comm.Recv(recv, peer, stream); });
}

std::shared_ptr<Work> ProcessGroup::SendRecvAsync(const DLTensor& send, int send_peer,
                                                  const DLTensor& recv, int recv_peer,
                                                  const ccl::Stream& compute_stream) {
  Payload payload = PayloadOf(send);
  payload.bytes += PayloadOf(recv).bytes;
  return Run(*state_, "send_recv", payload, nullptr, compute_stream,
             [&](const ccl::Stream& stream) {
               const auto& backend = state_->context->backend();
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
      *state_, "barrier", Payload{}, [] { return std::string("barrier()"); }, ccl::Stream(),
      [&](const ccl::Stream& stream) { state_->comm.Barrier(stream); });
}

void ProcessGroup::AllReduce(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op) {
  AllReduceAsync(send, recv, op)->Wait();
}
void ProcessGroup::Broadcast(const DLTensor& send, const DLTensor& recv, int root) {
  BroadcastAsync(send, recv, root)->Wait();
}
void ProcessGroup::Reduce(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op, int root) {
  ReduceAsync(send, recv, op, root)->Wait();
}
void ProcessGroup::AllGather(const DLTensor& send, const DLTensor& recv) {
  AllGatherAsync(send, recv)->Wait();
}
void ProcessGroup::ReduceScatter(const DLTensor& send, const DLTensor& recv, ccl::ReduceOp op) {
  ReduceScatterAsync(send, recv, op)->Wait();
}
void ProcessGroup::Send(const DLTensor& send, int peer) { SendAsync(send, peer)->Wait(); }
void ProcessGroup::Recv(const DLTensor& recv, int peer) { RecvAsync(recv, peer)->Wait(); }
void ProcessGroup::SendRecv(const DLTensor& send, int send_peer, const DLTensor& recv,
                            int recv_peer) {
  SendRecvAsync(send, send_peer, recv, recv_peer)->Wait();
}
void ProcessGroup::Barrier() { BarrierAsync()->Wait(); }

void ProcessGroup::Abort() { state_->AbortOnce(); }

}  // namespace infini::parallel
