#include "group_creation.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>

#include "flight_recorder.h"
#include "generation.h"
#include "infini/ccl/trace.h"
#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/logging.h"
#include "infini/parallel/store_bootstrap.h"
#include "infini/rendezvous/node_local_key.h"
#include "infini/rendezvous/store.h"
#include "local_init.h"
#include "loss_watcher.h"
#include "watchdog.h"
#include "work_state.h"

namespace infini::parallel::internal {
namespace {

// Extra time a backend's own host-side timeout gets beyond ours, so that the
// watchdog (which names the collective) reports first.
constexpr std::chrono::seconds kBackendTimeoutMargin{30};

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

void ValidateMembers(int world_size, const std::string& name, const std::vector<int>& members) {
  if (name.empty() || name.find('/') != std::string::npos) {
    throw ParallelUsageError("process group name '" + OneLine(name) +
                             "': expected a non-empty name without '/'");
  }
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
  const GroupEnvironment& environment = group.environment;
  rendezvous::Store& store = *environment.store;
  const std::string key = group.store_key + "/unique_id";
  if (group.group_rank == 0) {
    ccl::UniqueId id = environment.backend->GetUniqueId(std::move(bootstrap));
    store.Set(key, id.ToBytes());
    return id;
  }
  try {
    return ccl::UniqueId::FromBytes(store.Get(key));
  } catch (const rendezvous::StoreTimeoutError&) {
    throw ParallelError("process group '" + group.name + "': global rank " +
                        std::to_string(environment.rank.global_rank()) +
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
std::string DiagnoseInit(const std::function<std::shared_ptr<rendezvous::Store>()>& connect_store,
                         const std::string& backend_name, const std::string& name,
                         const std::string& store_key, const std::vector<int>& members) {
  std::shared_ptr<rendezvous::Store> store = connect_store();
  std::vector<int> absent;
  for (size_t i = 0; i < members.size(); ++i) {
    if (!store->Check({ArrivalKey(store_key, static_cast<int>(i))})) absent.push_back(members[i]);
  }
  if (absent.empty()) {
    return "every member of group '" + name + "' arrived at its init; backend '" + backend_name +
           "' did not finish making the communicator";
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

// Whether every member runs on this rank's node, as the launcher numbered
// them (a world renumbered by a recovery is not, and is never asked).
bool AllOnThisNode(const Rank& rank, const std::vector<int>& members) {
  const int per_node = rank.local_world_size();
  return std::all_of(members.begin(), members.end(),
                     [&](int member) { return member / per_node == rank.node_rank(); });
}

// "pg/<name>.<digest>/<generation>": where a group's keys live; in a world
// renumbered by a recovery, "pg/w<recoveries>/...", so that its groups never
// meet the old world's under the same numbers. A group of one node's ranks
// keeps its keys on the node ("node-local/pg/...": the node's store relay
// answers them, rendezvous/node_local_key.h).
std::string GroupStoreKey(const GroupEnvironment& environment, const std::string& name,
                          const std::vector<int>& members) {
  const bool renumbered = environment.world_generation > 0;
  const std::string world =
      renumbered ? "w" + std::to_string(environment.world_generation) + "/" : "";
  const std::string key = world + name + "." + MembersDigest(members);
  const std::string node_local = !renumbered && AllOnThisNode(environment.rank, members)
                                     ? std::string(rendezvous::kNodeLocalSegment) + "/"
                                     : "";
  return node_local + "pg/" + key + "/" +
         std::to_string(NextGeneration(environment.rank.global_rank(), key));
}

// Members of the group that are thread ranks of this process.
int LocalMembers(const Rank& rank, const std::vector<int>& members) {
  const int threads = rank.threads_per_process();
  const int process = rank.global_proc_rank();
  int local = 0;
  for (int member : members) local += member / threads == process ? 1 : 0;
  return local;
}

}  // namespace

namespace {

// A member's communicator for `group` (its name, members, environment set;
// group_rank its place): the group's keys, the unique id from its root and
// the backend's init, under the watchdog.
void JoinCommunicator(GroupState& group_state) {
  GroupState* group = &group_state;
  const GroupEnvironment& env = group->environment;
  const std::string& name = group->name;
  const int global_rank = env.rank.global_rank();
  group->store_key = GroupStoreKey(env, name, group->members);
  group->flight_group =
      FlightRecorder::Instance().RegisterGroup(group->store_key, name, group->members);

  // Joining waits for every member; the watchdog sees that wait too.
  auto init = std::make_shared<WorkState>();
  init->op = kInitOp;
  init->group = name;
  init->global_rank = global_rank;
  init->lane_rank = env.rank.launch_global_rank();
  init->timeout = env.timeout;
  // Copies (no backend or store handle): the diagnosis may run after the
  // group is gone, and the watchdog may hold it until the process ends.
  init->diagnose = [connect_store = env.connect_store, backend_name = env.backend->info().name,
                    name, store_key = group->store_key, members = group->members] {
    return DiagnoseInit(connect_store, backend_name, name, store_key, members);
  };
  Watchdog::Instance().AddWork(init);
  try {
    // Said before anything that waits, so a timed-out init can name who
    // never came.
    env.store->Set(ArrivalKey(group->store_key, group->group_rank), "");
    // The plugin may use the run's store under the group's own prefix.
    auto bootstrap = std::make_shared<StoreBootstrap>(
        env.key_prefix + "/" + group->store_key + "/plugin/", env.connect_store);
    const ccl::UniqueId id = ShareUniqueId(*group, bootstrap);
    ccl::CommConfig config;
    config.name = name;
    config.timeout_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(env.timeout + kBackendTimeoutMargin)
            .count();
    config.allow_device_sharing = env.shares_device;
    group->config = config;
    const auto& backend = env.backend;
    const int group_size = static_cast<int>(group->members.size());
    const int local_members = LocalMembers(env.rank, group->members);
    const ccl::Capabilities& capabilities = backend->capabilities();
    ccl::Communicator made;
    if (local_members > 1 &&
        (capabilities.multi_device_init() || !capabilities.concurrent_init())) {
      // Several thread ranks of this process: one multi-device init for all.
      made = JoinLocalInit(group->store_key, local_members, group->group_rank, env.device_index,
                           [&](const std::vector<int>& ranks, const std::vector<int>& devices) {
                             return backend->CommInitRanks(group_size, id, ranks, devices, config,
                                                           bootstrap);
                           });
      backend->SetDevice(env.device_index);
    } else {
      made = backend->CommInitRank(group_size, id, group->group_rank, config, bootstrap);
    }
    {
      // A remade group is watched while it joins: a revoke may come now.
      std::lock_guard<std::mutex> lock(group->abort_mutex);
      group->comm = std::move(made);
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
  if (env.debug != DebugLevel::kOff) {
    INFINI_LOG(INFO) << "process group '" << name << "' [" << MemberList(group->members)
                     << "]: group rank " << group->group_rank << ", keys " << env.key_prefix << "/"
                     << group->store_key;
  }
}

// The timeline's span of a group remade for joiners (docs/tracing.md).
void TraceRemade(const GroupState& group, int old_size, int new_size, int world_generation,
                 int64_t begin_ns) {
  if (!ccl::trace::Enabled()) return;
  ccl::trace::RecordFault(group.TraceLane(), ccl::trace::Category::kRecovery, "remake_group",
                          group.name,
                          ccl::trace::Facts()
                              .Add("old_size", old_size)
                              .Add("new_size", new_size)
                              .Add("group_rank", group.group_rank)
                              .Add("generation", world_generation),
                          begin_ns, ccl::trace::NowNs());
}

}  // namespace

std::unique_ptr<GroupState> CreateGroup(GroupEnvironment environment, const std::string& name,
                                        std::vector<int> members) {
  ValidateMembers(environment.rank.world_size(), name, members);
  auto group = std::make_unique<GroupState>(std::move(environment));
  group->name = name;
  group->registrations = std::make_shared<BufferRegistry>(name);
  group->members = std::move(members);
  const int global_rank = group->environment.rank.global_rank();
  auto position = std::find(group->members.begin(), group->members.end(), global_rank);
  if (position == group->members.end()) {
    // Not a member: nothing to join, but a recovery renumbers its members.
    if (group->environment.registry != nullptr) group->environment.registry->Add(group.get());
    return group;
  }
  group->group_rank = static_cast<int>(position - group->members.begin());
  JoinCommunicator(*group);
  Watchdog::Instance().AddGroup(group.get());
  group->watched = true;
  if (group->environment.registry != nullptr) group->environment.registry->Add(group.get());
  return group;
}

void RemakeGroupForJoiners(GroupState& group, int new_world_size, const Rank& renumbered,
                           int world_generation) {
  const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
  const int old_size = static_cast<int>(group.members.size());
  group.environment.rank = renumbered;
  group.environment.world_generation = world_generation;
  std::vector<int> members(static_cast<size_t>(new_world_size));
  for (int r = 0; r < new_world_size; ++r) members[static_cast<size_t>(r)] = r;
  {
    // The old communicator is healthy and idle (a step boundary): destroy it
    // before the new one, so a backend never holds two per device.
    std::lock_guard<std::mutex> lock(group.abort_mutex);
    group.registrations->DeregisterAll();
    if (group.comm.valid()) group.comm.Destroy();
    group.revoked_for_loss = std::make_shared<std::atomic<bool>>(false);
  }
  group.members = std::move(members);
  group.group_rank = renumbered.global_rank();
  group.next_collective = 0;
  JoinCommunicator(group);
  TraceRemade(group, old_size, new_world_size, world_generation, trace_begin);
  group.registrations->RegisterAll(group.comm);
}

void ShrinkGroupAfterLoss(GroupState& group, const std::vector<int>& new_rank_of,
                          const Rank& renumbered, int world_generation) {
  const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
  const int old_size = static_cast<int>(group.members.size());
  std::vector<int> excluded;
  std::vector<int> members;
  for (size_t i = 0; i < group.members.size(); ++i) {
    const int new_rank = new_rank_of[static_cast<size_t>(group.members[i])];
    if (new_rank < 0) {
      excluded.push_back(static_cast<int>(i));
    } else {
      members.push_back(new_rank);
    }
  }
  group.environment.rank = renumbered;
  group.environment.world_generation = world_generation;
  const bool member = group.group_rank >= 0;
  group.members = std::move(members);
  if (!member) return;  // nothing to shrink
  if (!group.comm.valid()) {
    throw ParallelError("process group '" + group.name + "': backend '" +
                        group.environment.backend->info().name +
                        "' has no comm_revoke, so the group was aborted at the loss and cannot "
                        "be shrunk: expected a backend with comm_shrink and comm_revoke");
  }
  // Every survivor excludes the same group ranks (from the same notices).
  ccl::Communicator shrunk = group.comm.Shrink(excluded, ccl::ShrinkMode::kAbort, group.config);
  {
    std::lock_guard<std::mutex> lock(group.abort_mutex);
    group.registrations->ForgetAll();  // the abort frees them
    group.comm.Abort();                // its outstanding work already ended; destroy could wait
    group.comm = std::move(shrunk);
    group.revoked_for_loss = std::make_shared<std::atomic<bool>>(false);
    group.registrations->RegisterAll(group.comm);
  }
  group.group_rank = static_cast<int>(
      std::find(group.members.begin(), group.members.end(), renumbered.global_rank()) -
      group.members.begin());
  group.store_key = GroupStoreKey(group.environment, group.name, group.members);
  group.flight_group =
      FlightRecorder::Instance().RegisterGroup(group.store_key, group.name, group.members);
  group.next_collective = 0;
  if (ccl::trace::Enabled()) {
    ccl::trace::RecordFault(group.TraceLane(), ccl::trace::Category::kRecovery, "shrink_group",
                            group.name,
                            ccl::trace::Facts()
                                .Add("old_size", old_size)
                                .Add("new_size", static_cast<int64_t>(group.members.size()))
                                .Add("excluded_group_ranks", excluded)
                                .Add("group_rank", group.group_rank)
                                .Add("generation", world_generation),
                            trace_begin, ccl::trace::NowNs());
  }
}

}  // namespace infini::parallel::internal
