// The staged backend's table: the device plugin's runtime entries as they
// are, the transport's identity and capabilities, and communicators that
// pair a transport communicator with a stream, events and host buffers on
// the device. The collectives are in staged_collectives.cc.
#include "staged_backend.h"

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "infini/ccl/error.h"
#include "infini/ccl/plugin_table.h"
#include "infini/common/device_backend_choice.h"
#include "infini/common/launch_env.h"
#include "staged_comm.h"
#include "staged_hierarchy.h"

namespace infini::ccl::internal {
namespace staged {
namespace {

const infiniCclPlugin_t* g_transport = nullptr;
const infiniCclPlugin_t* g_device = nullptr;
std::string g_name;
std::string g_version;
infiniCclPlugin_t g_table{};
thread_local std::string t_last_error;

infiniCclResult_t GetVersion(const char** version) {
  if (version == nullptr) return Fail(infiniCclInvalidArgument, "get_version: version is NULL");
  *version = g_version.c_str();
  return infiniCclSuccess;
}

const char* GetLastError() { return t_last_error.c_str(); }

const char* GetErrorString(infiniCclResult_t result) {
  return Transport().get_error_string(result);
}

int Supports(infiniCclCollective_t collective, DLDataType dtype, infiniCclRedOp_t op) {
  return Transport().supports(collective, dtype, op);
}

// The user's staged communicator over a new transport communicator, its
// islands settled (collective, like the transport's creation); on failure
// nothing is left, the transport communicator included.
infiniCclResult_t StageTransport(infiniCclComm_t transport, const infiniCclConfig_t* config,
                                 infiniCclComm_t* out) {
  StagedComm* made = nullptr;
  if (const infiniCclResult_t staged = MakeStagedComm(transport, config, &made);
      staged != infiniCclSuccess) {
    const std::string why = t_last_error;
    Transport().comm_destroy(transport);
    return Fail(staged, why);
  }
  infiniCclResult_t settled = SettleIslands(*made);
  if (settled == infiniCclSuccess) settled = StartProxy(*made);
  if (settled == infiniCclSuccess && made->islands && made->islands->leaders != nullptr) {
    settled = StartProxy(*made->islands->leaders);
  }
  // The segment is opened and pinned now, on every rank alike (a mixed
  // job's ranks differ in whether their calls are proxied), while no call
  // of it can be waiting (see HostBuffer).
  if (settled == infiniCclSuccess) settled = OpenSharedSlots(*made, "comm_init (shared memory)");
  if (settled != infiniCclSuccess) {
    const std::string why = t_last_error;
    FreeStagedComm(made, false);
    return Fail(settled, why);
  }
  *out = Handle(made);
  return infiniCclSuccess;
}

infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, const void* unique_id, int rank,
                               const infiniCclConfig_t* config,
                               const infiniCclBootstrap_t* bootstrap) {
  if (comm == nullptr) return Fail(infiniCclInvalidArgument, "comm_init_rank: comm is NULL");
  *comm = nullptr;
  infiniCclComm_t transport = nullptr;
  const infiniCclResult_t result =
      Transport().comm_init_rank(&transport, nranks, unique_id, rank, config, bootstrap);
  if (result != infiniCclSuccess) return FromPlugin(Transport(), result, "comm_init_rank");
  return StageTransport(transport, config, comm);
}

// A transport communicator made from another one (split, shrink), staged
// like its parent; *out is NULL when the transport made none (split with color < 0).
infiniCclResult_t Wrap(infiniCclResult_t result, infiniCclComm_t transport,
                       const infiniCclConfig_t* config, infiniCclComm_t* out, const char* call) {
  *out = nullptr;
  if (result != infiniCclSuccess) return FromPlugin(Transport(), result, call);
  if (transport == nullptr) return infiniCclSuccess;
  return StageTransport(transport, config, out);
}

infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                            const infiniCclConfig_t* config) {
  if (newcomm == nullptr) return Fail(infiniCclInvalidArgument, "comm_split: newcomm is NULL");
  infiniCclComm_t child = nullptr;
  const infiniCclResult_t result =
      Transport().comm_split(Of(comm)->transport, color, key, &child, config);
  return Wrap(result, child, config, newcomm, "comm_split");
}

infiniCclResult_t CommShrink(infiniCclComm_t comm, const int32_t* excluded, int32_t count,
                             const infiniCclConfig_t* config, int32_t flags,
                             infiniCclComm_t* new_comm) {
  if (new_comm == nullptr) return Fail(infiniCclInvalidArgument, "comm_shrink: new_comm is NULL");
  infiniCclComm_t child = nullptr;
  const infiniCclResult_t result =
      Transport().comm_shrink(Of(comm)->transport, excluded, count, config, flags, &child);
  return Wrap(result, child, config, new_comm, "comm_shrink");
}

infiniCclResult_t CommRevoke(infiniCclComm_t comm) {
  return FromPlugin(Transport(), Transport().comm_revoke(Of(comm)->transport), "comm_revoke");
}

infiniCclResult_t CommDestroy(infiniCclComm_t comm) { return FreeStagedComm(Of(comm), false); }
infiniCclResult_t CommAbort(infiniCclComm_t comm) { return FreeStagedComm(Of(comm), true); }

infiniCclResult_t CommGetAsyncError(infiniCclComm_t comm, infiniCclResult_t* error,
                                    const char** message) {
  {
    // A failure among the ranks of one host comes first: the transport
    // never saw that call.
    StagedComm& staged = *Of(comm);
    std::lock_guard<std::mutex> lock(staged.error_mutex);
    if (staged.async_error != infiniCclSuccess) {
      if (error != nullptr) *error = staged.async_error;
      if (message != nullptr) *message = staged.async_message.c_str();
      return infiniCclSuccess;
    }
  }
  return FromPlugin(Transport(),
                    Transport().comm_get_async_error(Of(comm)->transport, error, message),
                    "comm_get_async_error");
}

infiniCclResult_t CommCount(infiniCclComm_t comm, int* nranks) {
  return FromPlugin(Transport(), Transport().comm_count(Of(comm)->transport, nranks), "comm_count");
}

infiniCclResult_t CommUserRank(infiniCclComm_t comm, int* rank) {
  return FromPlugin(Transport(), Transport().comm_user_rank(Of(comm)->transport, rank),
                    "comm_user_rank");
}

// Only what every staged collective needs from the transport.
void RequireTransport(const infiniCclPlugin_t& transport) {
  if (transport.device_type != kDLCPU) {
    throw LoadError(std::string("INFINI_CCL_DEVICE_BACKEND: the transport backend '") +
                    transport.name +
                    "' keeps its buffers on a device, expected a host backend (gloo) for "
                    "--ccl_backend when --device_backend is set");
  }
  if (transport.comm_init_rank == nullptr) {
    throw LoadError(std::string("INFINI_CCL_DEVICE_BACKEND: the transport backend '") +
                    transport.name + "' has no comm_init_rank, which staging needs");
  }
}

void Fill(infiniCclPlugin_t& table, const infiniCclPlugin_t& transport,
          const infiniCclPlugin_t& device) {
  table = infiniCclPlugin_t{};
  table.struct_size = sizeof(table);
  table.abi_version = INFINI_CCL_PLUGIN_ABI_VERSION;
  table.name = g_name.c_str();
  table.get_version = &GetVersion;
  table.get_error_string = &GetErrorString;
  table.get_last_error = &GetLastError;
  // Ranks may share a device: staging never makes a device communicator.
  // Calls are proxied or done when they return, never in progress.
  table.features = (transport.features &
                    (INFINI_CCL_FEATURE_CONCURRENT_INIT | INFINI_CCL_FEATURE_ABORT_UNBLOCKS |
                     INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS)) |
                   INFINI_CCL_FEATURE_DEVICE_SHARING;
  table.supports = &Supports;
  table.device_type = device.device_type;
  table.device_vendor = device.device_vendor;
  table.device_kind = device.device_kind;
  table.visible_devices_env = device.visible_devices_env;
  table.get_device_count = device.get_device_count;
  table.set_device = device.set_device;
  table.get_device = device.get_device;
  table.mem_alloc = device.mem_alloc;
  table.mem_free = device.mem_free;
  table.memcpy_async = device.memcpy_async;
  table.memset_async = device.memset_async;
  table.stream_create = device.stream_create;
  table.stream_destroy = device.stream_destroy;
  table.stream_synchronize = device.stream_synchronize;
  table.stream_wait_event = device.stream_wait_event;
  table.event_create = device.event_create;
  table.event_destroy = device.event_destroy;
  table.event_record = device.event_record;
  table.event_query = device.event_query;
  table.event_synchronize = device.event_synchronize;
  table.event_elapsed_ms = device.event_elapsed_ms;
  table.host_register = device.host_register;
  table.host_unregister = device.host_unregister;
  table.host_flag_create = device.host_flag_create;
  table.host_flag_destroy = device.host_flag_destroy;
  table.stream_wait_host_flag = device.stream_wait_host_flag;
  table.stream_write_host_flag = device.stream_write_host_flag;
  table.unique_id_bytes = transport.unique_id_bytes;
  table.get_unique_id = transport.get_unique_id;
  table.comm_init_rank = &CommInitRank;
  table.comm_split = transport.comm_split != nullptr ? &CommSplit : nullptr;
  table.comm_destroy = &CommDestroy;
  table.comm_abort = transport.comm_abort != nullptr ? &CommAbort : nullptr;
  table.comm_get_async_error = &CommGetAsyncError;
  table.comm_count = &CommCount;
  table.comm_user_rank = &CommUserRank;
  if (transport.group_start != nullptr && transport.group_end != nullptr) {
    table.group_start = &GroupStart;
    table.group_end = &GroupEnd;
  }
  table.all_reduce = &AllReduce;
  table.broadcast = &Broadcast;
  table.reduce = &Reduce;
  table.all_gather = &AllGather;
  table.reduce_scatter = &ReduceScatter;
  table.send = &Send;
  table.recv = &Recv;
  table.all_to_all = transport.all_to_all != nullptr ? &AllToAll : nullptr;
  table.barrier = transport.barrier != nullptr ? &Barrier : nullptr;
  table.all_to_all_v = transport.all_to_all_v != nullptr ? &AllToAllV : nullptr;
  table.all_gather_v = transport.all_gather_v != nullptr ? &AllGatherV : nullptr;
  table.reduce_scatter_v = transport.reduce_scatter_v != nullptr ? &ReduceScatterV : nullptr;
  table.gather = transport.gather != nullptr ? &Gather : nullptr;
  table.scatter = transport.scatter != nullptr ? &Scatter : nullptr;
  // No stream capture: a host collective cannot be recorded into a graph,
  // so the host refuses capture naming the backend. No registration: the
  // device library's communicator is never made.
  if (transport.comm_shrink != nullptr && transport.comm_revoke != nullptr) {
    table.comm_shrink = &CommShrink;
    table.comm_revoke = &CommRevoke;
  }
}

}  // namespace

const infiniCclPlugin_t& Transport() { return *g_transport; }
const infiniCclPlugin_t& Device() { return *g_device; }

const std::string& LastError() { return t_last_error; }

infiniCclResult_t Fail(infiniCclResult_t result, std::string message) {
  t_last_error = std::move(message);
  return result;
}

infiniCclResult_t FromPlugin(const infiniCclPlugin_t& plugin, infiniCclResult_t result,
                             const char* call) {
  if (result == infiniCclSuccess || result == infiniCclInProgress) return result;
  const char* why = plugin.get_last_error();
  return Fail(result, std::string(plugin.name) + " " + call + ": " +
                          (why != nullptr && *why != '\0' ? why : "failed"));
}

void RegisteredRange::Register(void* pointer, size_t bytes) {
  Release();
  if (Device().host_register == nullptr || pointer == nullptr || bytes == 0) return;
  if (Device().host_register(pointer, bytes) == infiniCclSuccess) pointer_ = pointer;
}

void RegisteredRange::Release() {
  if (pointer_ != nullptr) Device().host_unregister(pointer_);
  pointer_ = nullptr;
}

void HostBuffer::Free::operator()(char* data) const { std::free(data); }

char* HostBuffer::Reserve(size_t bytes) {
  constexpr size_t kPage = 4096;
  if (bytes > bytes_) {
    registered_.Release();
    data_.reset();
    bytes_ = 0;
    const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
    data_.reset(static_cast<char*>(std::aligned_alloc(kPage, rounded)));
    if (data_ == nullptr) return nullptr;
    bytes_ = bytes;
    registered_.Register(data_.get(), rounded);
  }
  return data_.get();
}

namespace {

enum class ProxyPolicy { kAlways, kUnlessShared, kNever };

// INFINI_CCL_STAGED_DEFER. Unset, a rank whose device other ranks of the
// communicator use stays inline: processes sharing a GPU time-slice it, and
// a stream held by a host flag keeps its process's slices (gpt2 d12, 8
// ranks on one H200: 16,019 tokens/s proxied, 29,169 inline; docs/ccl.md).
// Sets *why for a value other than 0 or 1.
ProxyPolicy ProxyPolicyOf(std::string* why) {
  const char* text = std::getenv("INFINI_CCL_STAGED_DEFER");
  if (text == nullptr || *text == '\0') return ProxyPolicy::kUnlessShared;
  if (std::string(text) == "1") return ProxyPolicy::kAlways;
  if (std::string(text) == "0") return ProxyPolicy::kNever;
  *why = std::string("INFINI_CCL_STAGED_DEFER='") + text +
         "': expected 1 (staged calls return once enqueued, where the device has host flags), "
         "0 (they return after their host part) or nothing (1 unless other ranks share the "
         "device)";
  return ProxyPolicy::kNever;
}

void FreeWords(StagedComm& comm) {
  for (uint32_t*& word : comm.words) {
    if (word != nullptr) Device().host_flag_destroy(word);
    word = nullptr;
  }
}

// The words and the worker of proxied calls, where the device can write and
// wait on host flags (a write and a wait that is met at once, on the
// communicator's stream, show it); else every call stays inline.
void StartWorker(StagedComm& comm) {
  const infiniCclPlugin_t& device = Device();
  if (device.host_flag_create == nullptr || device.stream_write_host_flag == nullptr) return;
  for (uint32_t*& word : comm.words) {
    if (device.host_flag_create(&word) != infiniCclSuccess || word == nullptr) {
      word = nullptr;
      FreeWords(comm);
      return;
    }
  }
  uint32_t* probe = comm.words[0];
  if (device.stream_write_host_flag(comm.stream, probe, 0) != infiniCclSuccess ||
      device.stream_wait_host_flag(comm.stream, probe, 0) != infiniCclSuccess ||
      device.stream_synchronize(comm.stream) != infiniCclSuccess) {
    FreeWords(comm);
    return;
  }
  comm.worker = std::make_unique<StagedWorker>();
}

}  // namespace

infiniCclResult_t StartProxy(StagedComm& comm) {
  std::string bad_setting;
  const ProxyPolicy policy = ProxyPolicyOf(&bad_setting);
  if (!bad_setting.empty()) return Fail(infiniCclInvalidUsage, bad_setting);
  if (policy == ProxyPolicy::kAlways ||
      (policy == ProxyPolicy::kUnlessShared && !comm.device_shared)) {
    StartWorker(comm);
  }
  return infiniCclSuccess;
}

infiniCclResult_t OpenSharedSlots(StagedComm& comm, const char* call) {
  std::string why;
  const infiniCclResult_t opened =
      SharedSlots::Open(Transport(), comm.transport, &comm.slots, &why);
  if (opened != infiniCclSuccess) {
    return why.empty() ? FromPlugin(Transport(), opened, call)
                       : Fail(opened, std::string(call) + ": " + why);
  }
  comm.shared = comm.slots ? StagedComm::SharedUse::kOn : StagedComm::SharedUse::kOff;
  if (comm.slots) comm.slots_registered.Register(comm.slots->mapping(), comm.slots->mapped_bytes());
  return infiniCclSuccess;
}

infiniCclResult_t MakeStagedComm(infiniCclComm_t transport, const infiniCclConfig_t* config,
                                 StagedComm** made) {
  auto comm = std::make_unique<StagedComm>();
  comm->transport = transport;
  if (config != nullptr &&
      config->struct_size >= offsetof(infiniCclConfig_t, timeout_ms) + sizeof(int64_t) &&
      config->timeout_ms != INFINI_CCL_CONFIG_UNDEF_INT64 && config->timeout_ms > 0) {
    comm->timeout_ms = config->timeout_ms;
  }
  const infiniCclPlugin_t& device = Device();
  infiniCclResult_t result = device.get_device(&comm->device);
  if (result == infiniCclSuccess) result = device.stream_create(&comm->stream);
  for (infiniCclEvent_t* event :
       {&comm->ready, &comm->done, &comm->signal_events[0][0], &comm->signal_events[0][1],
        &comm->signal_events[1][0], &comm->signal_events[1][1]}) {
    if (result == infiniCclSuccess) result = device.event_create(event);
  }
  if (result != infiniCclSuccess) {
    const infiniCclResult_t failed = FromPlugin(device, result, "staging setup");
    const std::string why = t_last_error;
    for (infiniCclEvent_t event : comm->Events()) {
      if (event != nullptr) device.event_destroy(event);
    }
    if (comm->stream != nullptr) device.stream_destroy(comm->stream);
    return Fail(failed, why);
  }
  *made = comm.release();
  return infiniCclSuccess;
}

infiniCclResult_t FreeStagedComm(StagedComm* comm, bool abort) {
  if (comm == nullptr) return infiniCclSuccess;
  const infiniCclPlugin_t& device = Device();
  infiniCclResult_t result = infiniCclSuccess;
  if (abort) {
    // Unblocks a call of another thread, which then gives the staging area
    // up. Once: the islands' leaders' communicator was aborted already when
    // its parent's abort unblocked a hierarchical call.
    if (!comm->aborting.exchange(true, std::memory_order_acq_rel)) {
      result = FromPlugin(Transport(), Transport().comm_abort(comm->transport), "comm_abort");
    }
    UnblockIslands(*comm);
  }
  // Proxied calls' host steps run first (after an abort they fail at
  // once), each releasing the stream.
  comm->worker.reset();
  {
    std::lock_guard<std::mutex> lock(comm->calls);
    FreeIslands(*comm, abort);
    // The last copies back may still read the host buffers.
    const infiniCclResult_t synced = device.stream_synchronize(comm->stream);
    if (!abort && synced != infiniCclSuccess) result = FromPlugin(device, synced, "comm_destroy");
    for (infiniCclEvent_t event : comm->Events()) device.event_destroy(event);
    device.stream_destroy(comm->stream);
    // No stream waits on the words now.
    FreeWords(*comm);
  }
  if (!abort) {
    const infiniCclResult_t destroyed = Transport().comm_destroy(comm->transport);
    if (result == infiniCclSuccess) result = FromPlugin(Transport(), destroyed, "comm_destroy");
  }
  delete comm;
  return result;
}

}  // namespace staged

std::string StagedName(const infiniCclPlugin_t& transport, const infiniCclPlugin_t& device) {
  return std::string(transport.name) + "+" + (&transport == &device ? "host" : device.name);
}

const infiniCclPlugin_t* ComposeStaged(const infiniCclPlugin_t* transport,
                                       const infiniCclPlugin_t* device) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (staged::g_transport != nullptr) {
    if (staged::g_transport == transport && staged::g_device == device) return &staged::g_table;
    throw LoadError("a staged backend " + StagedName(*staged::g_transport, *staged::g_device) +
                    " is loaded already; a process stages through one device backend, asked "
                    "for " +
                    StagedName(*transport, *device));
  }
  staged::RequireTransport(*transport);
  const char* transport_version = nullptr;
  const char* device_version = nullptr;
  transport->get_version(&transport_version);
  device->get_version(&device_version);
  staged::g_version = std::string(transport_version != nullptr ? transport_version : "unknown") +
                      ", staged through " + (transport == device ? "host" : device->name) + " (" +
                      (device_version != nullptr ? device_version : "unknown") + ")";
  staged::g_name = StagedName(*transport, *device);
  staged::Fill(staged::g_table, *transport, *device);
  staged::g_transport = transport;
  staged::g_device = device;
  return &staged::g_table;
}

RankStaging StagingOfThisRank() {
  const char* text = std::getenv(env::kDeviceBackend);
  if (text == nullptr || *text == '\0') return {};
  const char* local_rank_text = std::getenv(env::torchrun::kLocalRank);
  const int local_rank = local_rank_text != nullptr ? std::atoi(local_rank_text) : 0;
  try {
    const device_backend::Choice choice = device_backend::Parse(text);
    RankStaging staging;
    staging.device = device_backend::For(choice, local_rank);
    staging.host_in_mixed_job = staging.device.empty() && device_backend::NamesADevice(choice);
    return staging;
  } catch (const std::invalid_argument& error) {
    throw LoadError(std::string(env::kDeviceBackend) + "='" + text +
                    "' (--device_backend): " + error.what());
  }
}

namespace {

// The Backend of a composed staged table; `info` describes its device.
std::shared_ptr<const Backend> StagedBackend(const infiniCclPlugin_t* table, BackendInfo info) {
  info.name = table->name;
  info.abi_version = INFINI_CCL_PLUGIN_ABI_VERSION;
  info.unique_id_bytes = table->unique_id_bytes;
  const char* version = nullptr;
  table->get_version(&version);
  info.version = version;
  return std::make_shared<const Backend>(table, std::move(info));
}

}  // namespace

std::shared_ptr<const Backend> MakeStagedBackend(const Backend& transport, const Backend& device) {
  if (device.info().device_type == kDLCPU) {
    throw LoadError(std::string(env::kDeviceBackend) + "='" + device.info().name +
                    "' (--device_backend): a host backend, expected one whose buffers live on a "
                    "device (nccl, or another accelerator plugin)");
  }
  const infiniCclPlugin_t* table = ComposeStaged(&PluginTable(transport), &PluginTable(device));
  BackendInfo info = device.info();
  info.library_path = transport.info().library_path + " + " + device.info().library_path;
  info.transport_library_path = transport.info().library_path;
  return StagedBackend(table, std::move(info));
}

std::shared_ptr<const Backend> MakeHostStagedBackend(const Backend& transport) {
  const infiniCclPlugin_t* table = ComposeStaged(&PluginTable(transport), &PluginTable(transport));
  return StagedBackend(table, transport.info());
}

}  // namespace infini::ccl::internal
