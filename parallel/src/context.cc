#include "infini/parallel/context.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "group_creation.h"
#include "group_environment.h"
#include "infini/ccl/device_backends.h"
#include "infini/ccl/trace.h"
#include "infini/common/launch_env.h"
#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/logging.h"
#include "infini/parallel/process_group.h"
#include "infini/parallel/store_access.h"
#include "infini/rendezvous/endpoint.h"
#include "infini/rendezvous/prefix_store.h"
#include "infini/rendezvous/tcp_store.h"
#include "loss_watcher.h"
#include "run_store.h"
#include "watchdog.h"
#include "work_state.h"

namespace infini::parallel {
namespace {

constexpr std::chrono::milliseconds kLossWatcherStoreTimeout{5000};

// The backend as asked: the flag's value, else INFINI_CCL_BACKEND's, else auto.
std::string BackendSpecText(const std::string& spec) {
  if (!spec.empty()) return OneLine(spec);
  const char* from_environment = std::getenv(env::kBackend);
  return from_environment != nullptr && *from_environment != '\0' ? OneLine(from_environment)
                                                                  : "auto";
}

// One hosted store per port for the whole process: thread ranks share it, and
// it lives until the process ends (other processes may still be reading).
std::shared_ptr<rendezvous::TcpStoreServer> HostStore(const std::string& host, uint16_t port,
                                                      const std::string& token) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, uint16_t>, std::shared_ptr<rendezvous::TcpStoreServer>>
      servers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& server = servers[{host, port}];
  if (server == nullptr) {
    rendezvous::TcpStoreServerOptions options;
    options.host = host;
    options.port = port;
    options.token = token;
    server = rendezvous::TcpStoreServer::Start(options);
  }
  return server;
}

// "CUDA_VISIBLE_DEVICES='0,1'", "ASCEND_RT_VISIBLE_DEVICES unset", or "" for
// a backend without a visibility variable: the plugin names its own.
std::string VisibleDevicesVariable(const Environment& environment,
                                   const ccl::BackendInfo& backend) {
  const std::string& variable = backend.visible_devices_env;
  if (variable.empty()) return "";
  auto it = environment.find(variable);
  if (it == environment.end()) return variable + " unset";
  return variable + "='" + OneLine(it->second) + "'";
}

}  // namespace

namespace internal {

RunStoreEndpoint OpenRunStore(const Environment& environment, const ProcessTopology& topology,
                              const RuntimeSettings& settings) {
  RunStoreEndpoint endpoint;
  // The run's secret, handed down by the launcher; without one (ranks started
  // by torchrun, srun or mpirun) the store is as open as torchrun's.
  const auto token_entry = environment.find(env::kRunToken);
  const std::string token = token_entry != environment.end() ? token_entry->second : "";
  endpoint.token = token;
  const StoreLocation& location = settings.store;
  std::string host = location.host;
  uint16_t port = location.port;
  endpoint.store_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(settings.timeout + kStoreTimeoutMargin);
  if (location.kind == StoreLocation::Kind::kInProcess) {
    auto server = HostStore("127.0.0.1", 0, token);
    host = "127.0.0.1";
    port = server->port();
    endpoint.hosted_server = server;
  } else if (location.kind == StoreLocation::Kind::kMaster && topology.global_proc_rank == 0) {
    // Only on MASTER_ADDR's address when this host has it, else on every
    // interface, saying so (docs/rendezvous.md).
    const std::string listen_address =
        MasterStoreListenAddress(location, topology.nnodes, LogPrefix());
    try {
      endpoint.hosted_server = HostStore(listen_address, port, token);
    } catch (const rendezvous::StoreError& error) {
      throw ParallelConfigError("MASTER_PORT='" + std::to_string(port) +
                                "': global rank 0 could not host the store there (" + error.what() +
                                "): expected a free port");
    }
    host = listen_address == "0.0.0.0" ? "127.0.0.1" : listen_address;
  }
  endpoint.host = host;
  endpoint.port = port;
  endpoint.key_namespace = KeyNamespace(settings);
  endpoint.settings = settings;
  return endpoint;
}

std::string KeyNamespace(const RuntimeSettings& settings) {
  return settings.run_id + "/" + std::to_string(settings.restart_count);
}

std::shared_ptr<rendezvous::Store> RunStoreEndpoint::Connect() const {
  return ConnectRunStore(host, port, store_timeout, token, key_namespace, settings);
}

std::shared_ptr<rendezvous::Store> ConnectRunStore(const std::string& host, uint16_t port,
                                                   std::chrono::milliseconds timeout,
                                                   const std::string& token,
                                                   const std::string& key_namespace,
                                                   const RuntimeSettings& settings) {
  // A wait for an unreachable store says so on stderr (store_access.h).
  std::shared_ptr<rendezvous::Store> client =
      ConnectToRunStore(host, port, timeout, token, settings, LogPrefix());
  client->set_timeout(timeout);
  return std::make_shared<rendezvous::PrefixStore>(key_namespace, std::move(client));
}

}  // namespace internal

Context::Context(Rank rank, RuntimeSettings settings)
    : rank_(std::move(rank)), settings_(std::move(settings)) {}

Context::~Context() = default;

std::string Context::key_namespace() const { return internal::KeyNamespace(settings_); }

namespace {

// The entries of a backend list (cpu:gloo,cuda:nccl) other than the one
// Backend::Load chose; in-place recovery rebuilds one communicator per group,
// so a list is refused with --on_failure=shrink.
std::optional<ccl::DeviceBackends> LoadDeviceBackendList(const std::string& spec_option,
                                                         const RuntimeSettings& settings) {
  const char* from_environment = std::getenv(env::kBackend);
  const std::string spec = !spec_option.empty()          ? spec_option
                           : from_environment != nullptr ? from_environment
                                                         : "";
  if (!ccl::IsDeviceBackendList(spec)) return std::nullopt;
  if (settings.shrink_on_failure) {
    throw ParallelConfigError(std::string(env::kBackend) + "='" + spec +
                              "': a backend per device type is not recovered in place; "
                              "expected one backend with --on_failure=shrink");
  }
  return ccl::DeviceBackends::Load(spec);
}

}  // namespace

std::shared_ptr<Context> Context::Create(const ContextOptions& options) {
  const Environment environment = options.environment ? *options.environment : CurrentEnvironment();
  const ProcessTopology topology = ReadProcessTopology(environment);
  RuntimeSettings settings = ReadRuntimeSettings(environment, topology);
  Rank rank(topology, options.thread_rank, options.threads_per_process);
  std::shared_ptr<Context> context(new Context(rank, settings));
  SetLogIdentity(rank);
  if (!settings.log_dir.empty()) EnableRankLogFile(rank, settings.log_dir);

  // The plugin's entries called here (its process-wide init, the device
  // count, set_device) run before any group exists: a vendor library that
  // never returns from one ends the process in one line, as a group's init
  // does, instead of hanging it.
  auto loading = std::make_shared<internal::WorkState>();
  loading->op = internal::kLoadOp;
  loading->global_rank = rank.global_rank();
  loading->lane_rank = rank.launch_global_rank();
  loading->timeout = settings.timeout;
  loading->description = "loading backend '" + BackendSpecText(options.backend) +
                         "' (global rank " + std::to_string(rank.global_rank()) + ")";
  loading->diagnose = [] {
    return std::string("its plugin's init, get_device_count or set_device entry never returned");
  };
  internal::Watchdog::Instance().AddWork(loading);
  try {
    context->backend_ = ccl::Backend::Load(options.backend);
    const auto& backend = context->backend_;
    if (auto list = LoadDeviceBackendList(options.backend, settings)) {
      context->backend_spec_ = list->spec();
      for (const auto& entry : list->entries()) {
        if (entry.second != backend) context->other_backends_.push_back(entry);
      }
    }
    if (options.threads_per_process > 1 && backend->capabilities().one_rank_per_process()) {
      throw ParallelConfigError(
          "--nthread_per_process=" + std::to_string(options.threads_per_process) + ": backend '" +
          backend->info().name +
          "' allows one rank per process (its plugin declares "
          "INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS); expected 1, with one process per rank "
          "(infini_run --nproc_per_node)");
    }
    const DLDeviceType device_type = backend->info().device_type;
    const int visible = backend->DeviceCount();
    context->device_index_ = SelectDeviceIndex(
        rank, device_type, visible,
        {.allow_sharing = settings.allow_device_sharing,
         .isolated = settings.devices_isolated,
         .visible_devices_variable = VisibleDevicesVariable(environment, backend->info())});
    context->shares_device_ = SharesDevice(rank, device_type, visible, settings.devices_isolated);
    backend->SetDevice(context->device_index_);
  } catch (...) {
    loading->Failed(std::current_exception());
    throw;
  }
  loading->Complete();
  const auto& backend = context->backend_;

  internal::RunStoreEndpoint endpoint = internal::OpenRunStore(environment, topology, settings);
  const std::string& host = endpoint.host;
  const uint16_t port = endpoint.port;
  context->hosted_server_ = endpoint.hosted_server;
  context->store_token_ = endpoint.token;
  context->store_host_ = host;
  context->store_port_ = port;
  context->store_timeout_ = endpoint.store_timeout;
  context->store_ = context->ConnectStore();
  context->launch_rank_of_.resize(static_cast<size_t>(rank.world_size()));
  for (int r = 0; r < rank.world_size(); ++r) context->launch_rank_of_[static_cast<size_t>(r)] = r;
  if (settings.shrink_on_failure) {
    context->groups_ = std::make_shared<internal::GroupRegistry>();
    // A joiner watches once admitted: the losses before are not its world's.
    context->joining_ = settings.join_notice > 0;
    if (!context->joining_) context->StartLossWatcher({});
  }
  if (settings.debug != DebugLevel::kOff) {
    INFINI_LOG(INFO) << rank.ToString() << " from " << topology.source << " variables: backend "
                     << backend->info().name << ", device " << context->device_index_
                     << (context->shares_device_ ? " (shared)" : "") << ", store " << host << ":"
                     << port << ", keys under " << context->key_namespace() << "/";
  }
  return context;
}

void Context::StartLossWatcher(std::set<int> known_lost) {
  // A short deadline: the watcher's only wait is for a notice whose number
  // was just taken, and it must not hold the Context's end for long.
  loss_watcher_ = std::make_unique<internal::LossWatcher>(
      internal::ConnectRunStore(store_host_, store_port_, kLossWatcherStoreTimeout, store_token_,
                                key_namespace(), settings_),
      groups_, std::move(known_lost), rank_.launch_global_rank());
}

std::shared_ptr<rendezvous::Store> Context::ConnectStore() const {
  return internal::ConnectRunStore(store_host_, store_port_, store_timeout_, store_token_,
                                   key_namespace(), settings_);
}

const std::shared_ptr<const ccl::Backend>& Context::BackendFor(DLDevice device) const {
  if (device.device_type == backend_->info().device_type) return backend_;
  for (const auto& [type, backend] : other_backends_) {
    if (type == device.device_type) return backend;
  }
  throw ccl::Error(infiniCclInvalidArgument,
                   "no backend for tensors on " + ccl::DeviceTypeName(device.device_type) +
                       " in INFINI_CCL_BACKEND='" +
                       (backend_spec_.empty() ? backend_->info().name : backend_spec_) + "'");
}

std::unique_ptr<ProcessGroup> Context::NewGroup(const std::string& name,
                                                std::vector<int> global_ranks) {
  // What the group may see of this rank: copies and shared handles, so that
  // a group (and a watchdog diagnosis of it) never needs the Context.
  internal::GroupEnvironment environment{
      .rank = rank_,
      .backend = backend_,
      .device_index = device_index_,
      .shares_device = shares_device_,
      .store = store_,
      .connect_store =
          [host = store_host_, port = store_port_, timeout = store_timeout_, token = store_token_,
           key_namespace = key_namespace(), settings = settings_] {
            return internal::ConnectRunStore(host, port, timeout, token, key_namespace, settings);
          },
      .key_prefix = key_namespace(),
      .timeout = settings_.timeout,
      .debug = settings_.debug,
      .shrink_on_failure = settings_.shrink_on_failure,
      .registry = groups_,
      .world_generation = world_generation_,
  };
  // Made in the list's order on every member, so their inits meet.
  std::vector<std::unique_ptr<ProcessGroup>> device_groups;
  for (const auto& [type, backend] : other_backends_) {
    internal::GroupEnvironment other = environment;
    other.backend = backend;
    other.device_index = type == kDLCPU ? 0 : device_index_;
    device_groups.push_back(std::make_unique<ProcessGroup>(internal::CreateGroup(
        std::move(other), name + "_" + ccl::DeviceTypeName(type), global_ranks)));
  }
  auto group = std::make_unique<ProcessGroup>(
      internal::CreateGroup(std::move(environment), name, std::move(global_ranks)));
  for (size_t i = 0; i < device_groups.size(); ++i) {
    group->AddDeviceGroup(other_backends_[i].first, std::move(device_groups[i]));
  }
  return group;
}

namespace {

std::string RankList(const std::set<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return text;
}

// How long a survivor waits for the others' agreement before it looks
// whether another loss came.
constexpr std::chrono::milliseconds kAgreementPoll{20};

}  // namespace

bool Context::LossPending() {
  if (loss_watcher_ == nullptr) return false;
  const std::set<int> lost = loss_watcher_->Lost();
  return std::any_of(lost.begin(), lost.end(), [&](int rank) { return !excluded_.count(rank); });
}

RecoveredWorld Context::RecoverFromLoss() {
  if (!settings_.shrink_on_failure) {
    throw ParallelUsageError(
        "RecoverFromLoss: expected a run under infini_run --on_failure=shrink "
        "(INFINI_ON_FAILURE=shrink); without it a lost rank ends the run");
  }
  if (joining_) {
    throw ParallelUsageError(
        "RecoverFromLoss: this rank is joining and not admitted yet: expected "
        "WaitToBeAdmitted first");
  }
  if (rank_.threads_per_process() > 1) {
    throw ParallelUsageError(
        "RecoverFromLoss: threads_per_process=" + std::to_string(rank_.threads_per_process()) +
        ": expected 1 (in-place recovery renumbers processes)");
  }
  const auto deadline = std::chrono::steady_clock::now() + settings_.timeout;
  const int me = rank_.launch_global_rank();
  const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
  for (;;) {
    // 1. Who is gone: the launcher's notices (the collective may have
    //    failed before the notice came).
    const std::optional<std::set<int>> noticed =
        loss_watcher_->WaitForLossBeyond(excluded_, deadline);
    if (!noticed) {
      throw ParallelError(
          rank_.ToString() + ": a collective failed but infini_run published no lost rank within " +
          "INFINI_CCL_TIMEOUT_S=" +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(settings_.timeout).count()) +
          " s (a failure that is not a loss; see the error before it)");
    }
    const std::set<int>& lost = *noticed;
    if (lost.count(me)) {
      throw ParallelError(rank_.ToString() + ": infini_run declared this rank lost (lost: " +
                          RankList(lost) + "); it cannot rejoin");
    }
    groups_->RevokeAll();  // the watcher did; also covers groups made since
    std::vector<int> survivors;
    for (int launch : launch_rank_of_) {
      if (!lost.count(launch)) survivors.push_back(launch);
    }
    // 2. Agree: every survivor says which losses it saw; all must say the
    //    same before any shrink, so that a second loss now (a new notice)
    //    starts the agreement again rather than splitting the survivors.
    const std::string round = "recovery/" + RankList(lost) + "/";
    store_->Set(round + std::to_string(me), "");
    std::vector<std::string> keys;
    for (int survivor : survivors) keys.push_back(round + std::to_string(survivor));
    bool agreed = false;
    while (!agreed) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw ParallelError(
            rank_.ToString() + ": the survivors did not all arrive at the recovery " +
            "from the loss of rank(s) " + RankList(lost) + " within INFINI_CCL_TIMEOUT_S");
      }
      if (loss_watcher_->Lost() != lost) break;  // another loss: again
      try {
        store_->Wait(keys, kAgreementPoll);  // answers once the last survivor arrives
        agreed = true;
      } catch (const rendezvous::StoreTimeoutError&) {
      }
    }
    if (!agreed) continue;
    // 3. Shrink every group among its survivors, renumbered.
    std::vector<int> new_rank_of(launch_rank_of_.size(), -1);
    for (size_t current = 0; current < launch_rank_of_.size(); ++current) {
      const auto at = std::find(survivors.begin(), survivors.end(), launch_rank_of_[current]);
      if (at != survivors.end()) new_rank_of[current] = static_cast<int>(at - survivors.begin());
    }
    const int new_global_rank = new_rank_of[static_cast<size_t>(rank_.global_rank())];
    const Rank renumbered = rank_.Renumbered(new_global_rank, static_cast<int>(survivors.size()));
    const int generation = world_generation_ + 1;
    for (internal::GroupState* group : groups_->Groups()) {
      try {
        internal::ShrinkGroupAfterLoss(*group, new_rank_of, renumbered, generation);
      } catch (const ccl::Error& error) {
        throw ParallelError(rank_.ToString() + ": shrinking process group '" + group->name +
                            "' after the loss of rank(s) " + RankList(lost) +
                            " failed: " + error.what());
      }
    }
    RecoveredWorld world;
    world.world_size = static_cast<int>(survivors.size());
    world.global_rank = new_global_rank;
    world.lost_ranks.assign(lost.begin(), lost.end());
    for (int rank : lost) {
      if (!excluded_.count(rank)) world.newly_lost_ranks.push_back(rank);
    }
    world.generation = generation;
    if (ccl::trace::Enabled()) {
      // From the call (the wait for the notice and the agreement included).
      ccl::trace::RecordFault(me, ccl::trace::Category::kRecovery, "shrink", "",
                              ccl::trace::Facts()
                                  .Add("lost_ranks", world.lost_ranks)
                                  .Add("newly_lost_ranks", world.newly_lost_ranks)
                                  .Add("old_world_size", rank_.world_size())
                                  .Add("new_world_size", world.world_size)
                                  .Add("old_rank", rank_.global_rank())
                                  .Add("new_rank", new_global_rank)
                                  .Add("generation", generation),
                              trace_begin, ccl::trace::NowNs());
    }
    rank_ = renumbered;
    launch_rank_of_ = std::move(survivors);
    excluded_ = lost;
    world_generation_ = generation;
    SetLogIdentity(rank_);
    if (settings_.debug != DebugLevel::kOff) {
      INFINI_LOG(INFO) << "recovered from the loss of rank(s) " << RankList(lost) << ": now "
                       << rank_.ToString();
    }
    return world;
  }
}

std::unique_ptr<ProcessGroup> Context::NewWorldGroup() {
  std::vector<int> everyone(static_cast<size_t>(rank_.world_size()));
  for (int i = 0; i < rank_.world_size(); ++i) everyone[static_cast<size_t>(i)] = i;
  return NewGroup("world", std::move(everyone));
}

std::unique_ptr<ProcessGroup> Context::NewLayoutGroup(const Layout& layout, Axis axis) {
  if (layout.world_size() != rank_.world_size()) {
    throw ParallelConfigError("layout DP=" + std::to_string(layout.data_parallel_size()) +
                              " × TP=" + std::to_string(layout.tensor_parallel_size()) +
                              " × PP=" + std::to_string(layout.pipeline_parallel_size()) + " has " +
                              std::to_string(layout.world_size()) +
                              " ranks: expected the world size " +
                              std::to_string(rank_.world_size()));
  }
  const int group_id = layout.GroupIdOf(axis, rank_.global_rank());
  return NewGroup(Layout::GroupName(axis, group_id), layout.GroupMembers(axis, group_id));
}

}  // namespace infini::parallel
