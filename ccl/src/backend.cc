// Backend: loading a plugin once per process (the registry, the init entry),
// the unique id and every way of making communicators (one rank, several
// ranks of a process, all of them over a MemoryBootstrapStore, ranks grouped
// between GroupStart and GroupEnd), each checked against what was asked, and
// choosing the device (streams, events and buffers are device.cc's).
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bootstrap_bridge.h"
#include "comm_config.h"
#include "deferred_init.h"
#include "infini/ccl/ccl.h"
#include "infini/ccl/device_backends.h"
#include "infini/ccl/memory_bootstrap_store.h"
#include "infini/ccl/plugin_table.h"
#include "infini/common/launch_env.h"
#include "infini/common/one_line.h"
#include "load_named.h"
#include "membership.h"
#include "plugin_init.h"
#include "plugin_loader.h"
#include "process_exit.h"
#include "staged_backend.h"
#include "tensor_checks.h"
#include "trace_device.h"
#include "trace_profiler.h"

namespace infini::ccl {
namespace {

bool IsBackendName(std::string_view spec) {
  if (spec.empty()) return false;
  for (char c : spec) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!allowed) return false;
  }
  return true;
}

// One Backend per plugin file per process: plugins own global state (CUDA
// contexts, a bootstrap server), and are never unloaded.
class BackendRegistry {
 public:
  std::shared_ptr<const Backend> Get(std::string_view spec, std::span<const VendorOption> options) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key(spec);
    if (auto found = by_spec_.find(key); found != by_spec_.end()) return found->second;
    std::shared_ptr<const Backend> backend =
        spec == "auto" ? LoadAuto(options) : LoadByName(spec, options);
    by_spec_[key] = backend;
    return backend;
  }

  // `transport`'s collectives staged through `device`'s runtime
  // (staged_backend.h).
  std::shared_ptr<const Backend> GetStaged(std::string_view transport, std::string_view device,
                                           std::span<const VendorOption> options) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = std::string(transport) + "+" + std::string(device);
    if (auto found = by_spec_.find(key); found != by_spec_.end()) return found->second;
    const auto host = LoadByName(transport == "auto" ? "gloo" : transport, options);
    std::shared_ptr<const Backend> staging_device;
    try {
      staging_device = LoadByName(device, options);
    } catch (const LoadError& error) {
      // Says where the name came from: --device_backend, or TRANSPORT+DEVICE.
      throw LoadError("staging " + host->info().name + " through '" + std::string(device) +
                      "': " + error.what());
    }
    auto backend = internal::MakeStagedBackend(*host, *staging_device);
    by_spec_[key] = backend;
    return backend;
  }

  // `transport` chunked as a staged backend, on host buffers (a host rank of
  // a mixed job: staged_backend.h).
  std::shared_ptr<const Backend> GetHostStaged(std::string_view transport,
                                               std::span<const VendorOption> options) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = std::string(transport) + "+host";
    if (auto found = by_spec_.find(key); found != by_spec_.end()) return found->second;
    auto backend = internal::MakeHostStagedBackend(
        *LoadByName(transport == "auto" ? "gloo" : transport, options));
    by_spec_[key] = backend;
    return backend;
  }

 private:
  std::shared_ptr<const Backend> LoadByName(std::string_view spec,
                                            std::span<const VendorOption> options) {
    internal::LoadedPlugin loaded = internal::OpenPlugin(spec);
    if (auto found = by_path_.find(loaded.library_path); found != by_path_.end()) {
      return found->second;
    }
    // Before any other entry: a library may read its settings only once.
    internal::InitPlugin(*loaded.plugin, loaded.library_path, options);
    internal::ConnectProfiler(loaded.profiler_v1, loaded.library_path);
    BackendInfo info;
    const infiniCclPlugin_t& plugin = *loaded.plugin;
    info.name = plugin.name;
    info.library_path = loaded.library_path;
    info.abi_version = loaded.abi_version;
    info.device_type = plugin.device_type;
    info.device_vendor = plugin.device_vendor;
    info.device_kind = plugin.device_kind;
    info.visible_devices_env =
        plugin.visible_devices_env != nullptr ? plugin.visible_devices_env : "";
    info.unique_id_bytes = plugin.unique_id_bytes;
    const char* version = nullptr;
    info.version = loaded.plugin->get_version(&version) == infiniCclSuccess && version != nullptr
                       ? version
                       : "unknown";
    auto backend = std::make_shared<const Backend>(loaded.plugin, std::move(info));
    by_path_[backend->info().library_path] = backend;
    return backend;
  }

  // The first installed accelerator plugin that loads and sees a device,
  // else gloo. Host plugins are not accelerators, whatever their name.
  std::shared_ptr<const Backend> LoadAuto(std::span<const VendorOption> options) {
    std::string why_not;  // each accelerator plugin passed over, and why
    for (const std::string& name : internal::InstalledBackendNames()) {
      if (name == "gloo") continue;
      std::string reason;
      try {
        std::shared_ptr<const Backend> candidate = LoadByName(name, options);
        if (candidate->info().device_type == kDLCPU) continue;  // a host plugin: not a fallback
        if (candidate->DeviceCount() > 0) return candidate;
        const std::string& variable = candidate->info().visible_devices_env;
        const char* visible = variable.empty() ? nullptr : std::getenv(variable.c_str());
        reason = "no device visible" +
                 (visible != nullptr ? " (" + variable + "='" + OneLine(visible) + "')" : "");
      } catch (const std::exception& error) {
        // Not usable here (no vendor library, no device): try the next one.
        reason = OneLine(error.what()).substr(0, 200);
      }
      why_not += (why_not.empty() ? "" : "; ") + name + ": " + reason;
    }
    std::shared_ptr<const Backend> gloo = LoadByName("gloo", options);
    SayAutoFellBack(why_not);
    return gloo;
  }

  // A silent fallback leaves a user who expected the GPU wondering why the
  // run is slow: one line, from the first process only (the launcher's own
  // device queries send stderr to /dev/null).
  static void SayAutoFellBack(const std::string& why_not) {
    const char* process_rank = std::getenv(env::infinitrain::kGlobalProcessRank);
    if (process_rank == nullptr) process_rank = std::getenv(env::torchrun::kRank);
    if (process_rank != nullptr && std::string_view(process_rank) != "0") return;
    std::fprintf(stderr, "infini_ccl: --ccl_backend=auto: using gloo (CPU): %s\n",
                 why_not.empty() ? "no accelerator plugin is installed (nccl or another vendor's)"
                                 : why_not.c_str());
  }

  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Backend>> by_spec_;
  std::map<std::string, std::shared_ptr<const Backend>> by_path_;
};

}  // namespace

Backend::Backend(const infiniCclPlugin_t* plugin, BackendInfo info)
    : plugin_(plugin), info_(std::move(info)), capabilities_(*plugin) {}

namespace {

BackendRegistry& Registry() {
  static BackendRegistry registry;
  return registry;
}

void RequireNameOrPath(std::string_view spec, const std::string& source, std::string_view whole) {
  if (spec.find('/') == std::string_view::npos && !IsBackendName(spec)) {
    throw LoadError(source + "='" + std::string(whole) +
                    "': expected a backend name (gloo, nccl, auto, or another plugin's name), "
                    "a path to a plugin library, TRANSPORT+DEVICE (gloo+nccl), or "
                    "TYPE:BACKEND,... (cpu:gloo,cuda:nccl)");
  }
}

}  // namespace

namespace internal {

std::shared_ptr<const Backend> LoadNamed(std::string_view spec,
                                         std::span<const VendorOption> options,
                                         const std::string& source, std::string_view whole,
                                         bool apply_device_backend) {
  // TRANSPORT+DEVICE: the staged backend's own name. A '+' after a '/' is
  // part of a path.
  if (const size_t plus = spec.find('+');
      plus != std::string_view::npos && spec.substr(0, plus).find('/') == std::string_view::npos) {
    const std::string_view transport = spec.substr(0, plus), device = spec.substr(plus + 1);
    RequireNameOrPath(transport, source, whole);
    RequireNameOrPath(device, source, whole);
    return Registry().GetStaged(transport, device, options);
  }
  RequireNameOrPath(spec, source, whole);
  if (apply_device_backend) {
    const RankStaging staging = StagingOfThisRank();
    if (!staging.device.empty()) return Registry().GetStaged(spec, staging.device, options);
    if (staging.host_in_mixed_job) return Registry().GetHostStaged(spec, options);
  }
  return Registry().Get(spec, options);
}

}  // namespace internal

std::shared_ptr<const Backend> Backend::Load(std::string_view spec,
                                             std::span<const VendorOption> options) {
  std::string source = "--ccl_backend";
  if (spec.empty()) {
    const char* from_environment = std::getenv(env::kBackend);
    spec = from_environment != nullptr && *from_environment != '\0' ? from_environment : "auto";
    source = env::kBackend;
  }
  // Before any plugin is opened: at exit, communicators kept in statics made
  // before this load are then not destroyed through a torn-down runtime.
  internal::WatchProcessExit();
  if (IsDeviceBackendList(spec)) return DeviceBackends::LoadFrom(spec, options, source).Primary();
  return internal::LoadNamed(spec, options, source, spec, true);
}

void Backend::Check(infiniCclResult_t result, std::string_view what) const {
  // In progress is not a failure: a non-blocking communicator's call goes on
  // in the background, and GetAsyncError says when it is done (NCCL's rule).
  if (result == infiniCclSuccess || result == infiniCclInProgress) return;
  const char* detail = plugin_->get_last_error();
  std::string message = info_.name + " " + std::string(what) + " failed: " + ResultName(result);
  if (detail != nullptr && *detail != '\0') message += ": " + std::string(detail);
  throw Error(result, message);
}

namespace {

void CheckIdSize(const Backend& backend, const UniqueId& id, std::string_view call) {
  if (id.size() != backend.info().unique_id_bytes) {
    throw Error(infiniCclInvalidArgument,
                std::string(call) + ": the unique id has " + std::to_string(id.size()) +
                    " bytes, backend '" + backend.info().name + "' expects " +
                    std::to_string(backend.info().unique_id_bytes) +
                    " (an id made by another backend, or cut short on its way)");
  }
}

void CheckRankOf(int world_size, int rank, std::string_view call) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(infiniCclInvalidArgument,
                std::string(call) + ": rank " + std::to_string(rank) +
                    " is outside [0, world_size=" + std::to_string(world_size) + ")");
  }
}

}  // namespace

UniqueId Backend::GetUniqueId(std::shared_ptr<BootstrapStore> bootstrap) const {
  std::string bytes(info_.unique_id_bytes, '\0');
  const auto bridge = internal::MakeBridge(std::move(bootstrap));
  Check(plugin_->get_unique_id(bytes.data(), bridge ? bridge->table() : nullptr), "get_unique_id");
  return UniqueId(std::move(bytes));
}

namespace {

// InitHandles' device for "the calling thread's current one".
constexpr int kCurrentDevice = -1;

// The calling thread's open GroupStart/GroupEnd, per backend: its depth and
// the CommInitRank calls that wait for its end.
struct OpenGroup {
  int depth = 0;
  std::vector<std::shared_ptr<internal::DeferredInit>> inits;
};
thread_local std::map<const Backend*, OpenGroup> t_open_groups;

OpenGroup* OpenGroupOf(const Backend* backend) {
  auto found = t_open_groups.find(backend);
  return found != t_open_groups.end() && found->second.depth > 0 ? &found->second : nullptr;
}

}  // namespace

bool internal::GroupIsOpen(const Backend& backend) {
  // Only the plugin's own group defers work to GroupEnd; the host's (no
  // group entries) runs each call as it comes.
  return backend.capabilities().group() && OpenGroupOf(&backend) != nullptr;
}

void internal::RefusePointToPointInHostGroup(const Backend& backend, std::string_view call) {
  if (backend.capabilities().group() || OpenGroupOf(&backend) == nullptr) return;
  throw Error(infiniCclUnsupported,
              std::string(call) + " inside GroupStart/GroupEnd: backend '" + backend.info().name +
                  "' has no group entries (group_start/group_end), so its point-to-point calls "
                  "cannot wait for GroupEnd and a send and a recv between two ranks would wait "
                  "for each other; call Send/Recv outside the group, even ranks sending first");
}

Communicator Backend::CommInitRank(int world_size, const UniqueId& id, int rank,
                                   const CommConfig& config,
                                   std::shared_ptr<BootstrapStore> bootstrap) const {
  CheckRankOf(world_size, rank, "CommInitRank");
  CheckIdSize(*this, id, "CommInitRank");
  auto bridge = internal::MakeBridge(std::move(bootstrap));
  if (OpenGroup* group = OpenGroupOf(this); group != nullptr) {
    // NCCL's pattern (GroupStart; one CommInitRank per local device;
    // GroupEnd) from one thread: made together at the outermost GroupEnd,
    // which every plugin can do, rather than trusting the plugin to defer.
    auto deferred =
        std::make_shared<internal::DeferredInit>(world_size, id, rank, GetDevice(), config, bridge);
    group->inits.push_back(deferred);
    return Communicator(shared_from_this(), std::move(deferred), rank, world_size,
                        std::move(bridge));
  }
  const int device = kCurrentDevice;
  const std::vector<infiniCclComm_t> handles =
      InitHandles(world_size, id, std::span(&rank, 1), std::span(&device, 1), config,
                  bridge ? bridge->table() : nullptr);
  return Communicator(shared_from_this(), handles[0], rank, world_size, std::move(bridge));
}

std::vector<infiniCclComm_t> Backend::InitHandles(int world_size, const UniqueId& id,
                                                  std::span<const int> ranks,
                                                  std::span<const int> devices,
                                                  const CommConfig& config,
                                                  const infiniCclBootstrap_t* table) const {
  const internal::PluginConfig plugin_config(config);
  const int count = static_cast<int>(ranks.size());
  if (count > 1 && capabilities_.one_rank_per_process()) {
    throw Error(infiniCclInvalidUsage,
                "backend '" + info_.name +
                    "' allows one rank per process (its plugin declares "
                    "INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS), asked for " +
                    std::to_string(count) +
                    " ranks in this process; run one process per rank (--nthread_per_process=1)");
  }
  std::vector<infiniCclComm_t> handles(ranks.size(), nullptr);
  const char* call = "comm_init_rank";

  if (count == 1 && plugin_->comm_init_rank != nullptr) {
    // On the current device, unless another is named: then as if it were.
    const int previous = devices[0] != kCurrentDevice ? GetDevice() : kCurrentDevice;
    if (previous != kCurrentDevice) SetDevice(devices[0]);
    const infiniCclResult_t result = plugin_->comm_init_rank(
        &handles[0], world_size, id.bytes().data(), ranks[0], plugin_config.get(), table);
    if (previous != kCurrentDevice) SetDevice(previous);
    Check(result, "comm_init_rank");
  } else if (plugin_->comm_init_ranks != nullptr) {
    call = "comm_init_ranks";
    std::vector<int> named(devices.begin(), devices.end());
    for (int& device : named) {
      if (device == kCurrentDevice) device = GetDevice();
    }
    Check(plugin_->comm_init_ranks(handles.data(), count, named.data(), ranks.data(), world_size,
                                   id.bytes().data(), plugin_config.get(), table),
          "comm_init_ranks");
  } else if (capabilities_.concurrent_init()) {
    // One thread per rank: each blocks in init until the group is complete,
    // so none starts before every thread exists (-1: one could not be made).
    std::vector<infiniCclResult_t> results(ranks.size(), infiniCclSuccess);
    std::vector<std::string> errors(ranks.size());
    std::vector<std::thread> threads;
    std::mutex gate_mutex;
    std::condition_variable gate_changed;
    int gate = 0;
    const auto open_gate = [&](int to) {
      {
        std::lock_guard<std::mutex> lock(gate_mutex);
        gate = to;
      }
      gate_changed.notify_all();
    };
    for (int i = 0; i < count; ++i) {
      try {
        threads.emplace_back([&, i] {
          std::unique_lock<std::mutex> lock(gate_mutex);
          gate_changed.wait(lock, [&] { return gate != 0; });
          if (gate < 0) return;
          lock.unlock();
          results[i] = plugin_->set_device(devices[i]);
          if (results[i] == infiniCclSuccess) {
            results[i] = plugin_->comm_init_rank(&handles[i], world_size, id.bytes().data(),
                                                 ranks[i], plugin_config.get(), table);
          }
          if (results[i] != infiniCclSuccess && results[i] != infiniCclInProgress) {
            errors[i] = plugin_->get_last_error();
          }
        });
      } catch (const std::system_error& error) {
        open_gate(-1);
        for (auto& thread : threads) thread.join();
        throw Error(infiniCclSystemError, "cannot start thread " + std::to_string(i + 1) + " of " +
                                              std::to_string(count) + " for " + info_.name +
                                              " comm_init_rank: " + error.what());
      }
    }
    open_gate(1);
    for (auto& thread : threads) thread.join();
    for (int i = 0; i < count; ++i) {
      if (results[i] == infiniCclSuccess || results[i] == infiniCclInProgress) continue;
      for (infiniCclComm_t handle : handles) {
        if (handle != nullptr) plugin_->comm_destroy(handle);
      }
      throw Error(results[i], info_.name + " comm_init_rank (rank " + std::to_string(ranks[i]) +
                                  ") failed: " + ResultName(results[i]) + ": " + errors[i]);
    }
  } else if (capabilities_.group()) {
    const int previous = GetDevice();
    Check(plugin_->group_start(), "group_start");
    infiniCclResult_t result = infiniCclSuccess;
    for (int i = 0; i < count && result == infiniCclSuccess; ++i) {
      result = plugin_->set_device(devices[i]);
      if (result == infiniCclSuccess) {
        result = plugin_->comm_init_rank(&handles[i], world_size, id.bytes().data(), ranks[i],
                                         plugin_config.get(), table);
      }
    }
    const infiniCclResult_t end = plugin_->group_end();
    SetDevice(previous);
    Check(result, "comm_init_rank");
    Check(end, "group_end");
  } else {
    throw Error(infiniCclUnsupported,
                "backend '" + info_.name + "' cannot create " + std::to_string(count) +
                    " ranks in one process: its plugin has neither comm_init_ranks, nor "
                    "concurrent comm_init_rank, nor group entries");
  }
  internal::CheckMembership(*this, handles, ranks, world_size, call);
  return handles;
}

std::vector<Communicator> Backend::CommInitRanks(int world_size, const UniqueId& id,
                                                 std::span<const int> ranks,
                                                 std::span<const int> devices,
                                                 const CommConfig& config,
                                                 std::shared_ptr<BootstrapStore> bootstrap) const {
  if (ranks.empty() || ranks.size() != devices.size()) {
    throw Error(infiniCclInvalidArgument,
                "CommInitRanks: " + std::to_string(ranks.size()) + " ranks and " +
                    std::to_string(devices.size()) +
                    " devices given, expected one device per rank and at least one rank");
  }
  for (int rank : ranks) CheckRankOf(world_size, rank, "CommInitRanks");
  CheckIdSize(*this, id, "CommInitRanks");
  auto bridge = internal::MakeBridge(std::move(bootstrap));
  const std::vector<infiniCclComm_t> handles =
      InitHandles(world_size, id, ranks, devices, config, bridge ? bridge->table() : nullptr);
  std::vector<Communicator> communicators;
  communicators.reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    communicators.push_back(
        Communicator(shared_from_this(), handles[i], ranks[i], world_size, bridge));
    communicators.back().RecordDevice(devices[i]);
  }
  return communicators;
}

std::vector<Communicator> Backend::CommInitAll(std::span<const int> devices,
                                               const CommConfig& config) const {
  auto bootstrap = std::make_shared<MemoryBootstrapStore>();
  const UniqueId id = GetUniqueId(bootstrap);
  std::vector<int> ranks(devices.size());
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  return CommInitRanks(static_cast<int>(devices.size()), id, ranks, devices, config, bootstrap);
}

// Without group entries the host keeps the group itself: CommInitRank waits
// for the outermost GroupEnd as on every plugin, collectives run as they
// come (every rank issues them in the same order), and point-to-point calls,
// which only a real group can make safe, are refused.
void Backend::GroupStart() const {
  if (capabilities_.group()) Check(plugin_->group_start(), "group_start");
  ++t_open_groups[this].depth;
}

void Backend::GroupEnd() const {
  OpenGroup* group = OpenGroupOf(this);
  if (group == nullptr) {
    throw Error(infiniCclInvalidUsage, "GroupEnd without a GroupStart on this thread");
  }
  const bool outermost = --group->depth == 0;
  const infiniCclResult_t result = capabilities_.group() ? plugin_->group_end() : infiniCclSuccess;
  if (outermost) RunDeferredInits();
  Check(result, "group_end");
}

void Backend::RunDeferredInits() const {
  std::vector<std::shared_ptr<internal::DeferredInit>> inits = std::move(t_open_groups[this].inits);
  t_open_groups.erase(this);
  // One batch per group (same id), in the order of each group's first
  // call, which every process of an SPMD program shares.
  std::exception_ptr first_failure;
  while (!inits.empty()) {
    std::vector<std::shared_ptr<internal::DeferredInit>> batch, rest;
    for (auto& init : inits) {
      (batch.empty() || init->id == batch[0]->id ? batch : rest).push_back(std::move(init));
    }
    inits = std::move(rest);
    if (first_failure) continue;  // the group is broken; its other ranks stay invalid
    std::vector<int> ranks, devices;
    for (const auto& init : batch) {
      ranks.push_back(init->rank);
      devices.push_back(init->device);
    }
    try {
      const internal::DeferredInit& first = *batch[0];
      const std::vector<infiniCclComm_t> handles =
          InitHandles(first.world_size, first.id, ranks, devices, first.config,
                      first.bootstrap ? first.bootstrap->table() : nullptr);
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!batch[i]->Fill(handles[i])) plugin_->comm_destroy(handles[i]);
      }
    } catch (...) {
      first_failure = std::current_exception();
    }
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

namespace internal {
struct PluginTableAccess {
  static const infiniCclPlugin_t& Of(const Backend& backend) { return *backend.plugin_; }
};
}  // namespace internal

const infiniCclPlugin_t& PluginTable(const Backend& backend) {
  return internal::PluginTableAccess::Of(backend);
}

int Backend::DeviceCount() const {
  int count = 0;
  Check(plugin_->get_device_count(&count), "get_device_count");
  return count;
}

std::optional<LinkBandwidth> Backend::GetLinkBandwidth(int device_index) const {
  if (plugin_->get_link_bandwidth == nullptr) return std::nullopt;
  infiniCclLinkBandwidth_t link{};
  link.struct_size = sizeof(link);
  Check(plugin_->get_link_bandwidth(device_index, &link), "get_link_bandwidth");
  link.kind[sizeof(link.kind) - 1] = '\0';  // the plugin's text, bounded
  return LinkBandwidth{link.peak_GBps > 0 ? link.peak_GBps : 0, link.kind};
}

void Backend::SetDevice(int device_index) const {
  Check(plugin_->set_device(device_index), "set_device");
}

int Backend::GetDevice() const {
  int device_index = 0;
  Check(plugin_->get_device(&device_index), "get_device");
  return device_index;
}

}  // namespace infini::ccl
