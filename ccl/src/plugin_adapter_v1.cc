// ABI v1 → v2. What changed between the versions, and what a v1 plugin gets:
//  - ids: fixed 128 bytes, passed by value → unique_id_bytes = 128;
//  - config: v1's zero-means-default struct ← v2's explicit "unset";
//  - async errors: no text → the empty message;
//  - capabilities: v1 had no query → every collective whose entry exists is
//    declared for every type (a v1 plugin reports what it lacks at run time,
//    as it always did), with the behaviour v1's header promised (concurrent
//    init, non-blocking communicators, abort unblocking a blocked call);
//  - bootstrap: a v1 plugin never sees the host's store.
#include <cstring>
#include <mutex>
#include <utility>

#include "infini/ccl/error.h"
#include "plugin_versions.h"
#include "table_checks.h"

namespace infini::ccl::internal {
namespace {

// Bytes of a v1 table up to and including its last mandatory entry; the
// optional capture entries after it may be absent from an older plugin.
constexpr size_t kMinimumV1TableBytes = offsetof(infiniCclPlugin_v1_t, stream_begin_capture);

void ValidateV1Table(const infiniCclPlugin_v1_t& plugin, const std::string& library_path) {
  RequireHeader(library_path, INFINI_CCL_PLUGIN_SYMBOL_V1, INFINI_CCL_PLUGIN_ABI_VERSION_V1,
                plugin.abi_version, plugin.struct_size, kMinimumV1TableBytes);
  RequireEntries({Named("name", plugin.name),
                  Named("get_version", plugin.get_version),
                  Named("get_error_string", plugin.get_error_string),
                  Named("get_last_error", plugin.get_last_error),
                  Named("get_device_count", plugin.get_device_count),
                  Named("set_device", plugin.set_device),
                  Named("get_device", plugin.get_device),
                  Named("mem_alloc", plugin.mem_alloc),
                  Named("mem_free", plugin.mem_free),
                  Named("memcpy_async", plugin.memcpy_async),
                  Named("memset_async", plugin.memset_async),
                  Named("stream_create", plugin.stream_create),
                  Named("stream_destroy", plugin.stream_destroy),
                  Named("stream_synchronize", plugin.stream_synchronize),
                  Named("stream_wait_event", plugin.stream_wait_event),
                  Named("event_create", plugin.event_create),
                  Named("event_destroy", plugin.event_destroy),
                  Named("event_record", plugin.event_record),
                  Named("event_query", plugin.event_query),
                  Named("event_synchronize", plugin.event_synchronize),
                  Named("event_elapsed_ms", plugin.event_elapsed_ms),
                  Named("get_unique_id", plugin.get_unique_id),
                  Named("comm_init_rank", plugin.comm_init_rank),
                  Named("comm_split", plugin.comm_split),
                  Named("comm_destroy", plugin.comm_destroy),
                  Named("comm_abort", plugin.comm_abort),
                  Named("comm_get_async_error", plugin.comm_get_async_error),
                  Named("comm_count", plugin.comm_count),
                  Named("comm_user_rank", plugin.comm_user_rank),
                  Named("group_start", plugin.group_start),
                  Named("group_end", plugin.group_end),
                  Named("all_reduce", plugin.all_reduce),
                  Named("broadcast", plugin.broadcast),
                  Named("reduce", plugin.reduce),
                  Named("all_gather", plugin.all_gather),
                  Named("reduce_scatter", plugin.reduce_scatter),
                  Named("send", plugin.send),
                  Named("recv", plugin.recv),
                  Named("barrier", plugin.barrier)},
                 library_path, 1);
}

// Trampolines cannot carry a pointer to "their" v1 table, so each adapted
// plugin gets a slot, and the trampolines are instantiated once per slot.
constexpr int kSlots = 8;
const infiniCclPlugin_v1_t* g_v1_tables[kSlots] = {};
infiniCclPlugin_v2_t g_v2_tables[kSlots] = {};

infiniCclConfig_v1_t ToV1(const infiniCclConfig_t* config) {
  infiniCclConfig_v1_t v1{};
  v1.struct_size = sizeof(v1);
  v1.blocking = 1;
  if (config == nullptr) return v1;
  // Read only the fields the caller's header had.
  const auto has = [config](size_t field_end) { return config->struct_size >= field_end; };
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, blocking)) &&
      config->blocking != INFINI_CCL_CONFIG_UNDEF_INT) {
    v1.blocking = config->blocking;
  }
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, timeout_ms)) &&
      config->timeout_ms != INFINI_CCL_CONFIG_UNDEF_INT64) {
    v1.timeout_ms = config->timeout_ms;
  }
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, comm_name))) v1.comm_name = config->comm_name;
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, allow_device_sharing)) &&
      config->allow_device_sharing != INFINI_CCL_CONFIG_UNDEF_INT) {
    v1.allow_device_sharing = config->allow_device_sharing;
  }
  return v1;
}

template <int Slot>
struct Trampolines {
  static const infiniCclPlugin_v1_t& V1() { return *g_v1_tables[Slot]; }

  static int Supports(infiniCclCollective_t, DLDataType, infiniCclRedOp_t) { return 1; }

  static infiniCclResult_t GetUniqueId(void* unique_id, const infiniCclBootstrap_t*) {
    infiniCclUniqueId_v1 id{};
    const infiniCclResult_t result = V1().get_unique_id(&id);
    if (result == infiniCclSuccess) std::memcpy(unique_id, id.internal, sizeof(id.internal));
    return result;
  }

  static infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, const void* unique_id,
                                        int rank, const infiniCclConfig_t* config,
                                        const infiniCclBootstrap_t*) {
    infiniCclUniqueId_v1 id{};
    std::memcpy(id.internal, unique_id, sizeof(id.internal));
    const infiniCclConfig_v1_t v1_config = ToV1(config);
    return V1().comm_init_rank(comm, nranks, id, rank, &v1_config);
  }

  static infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key,
                                     infiniCclComm_t* newcomm, const infiniCclConfig_t* config) {
    const infiniCclConfig_v1_t v1_config = ToV1(config);
    return V1().comm_split(comm, color, key, newcomm, &v1_config);
  }

  static infiniCclResult_t GetAsyncError(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                         const char** message) {
    if (message != nullptr) *message = "";
    return V1().comm_get_async_error(comm, async_error);
  }

  static void Fill(infiniCclPlugin_v2_t& v2) {
    const infiniCclPlugin_v1_t& v1 = V1();
    v2.supports = &Supports;
    v2.get_unique_id = &GetUniqueId;
    v2.comm_init_rank = &CommInitRank;
    v2.comm_split = v1.comm_split != nullptr ? &CommSplit : nullptr;
    v2.comm_get_async_error = &GetAsyncError;
  }
};

template <int... Slots>
void FillSlot(int slot, infiniCclPlugin_v2_t& v2, std::integer_sequence<int, Slots...>) {
  ((slot == Slots ? Trampolines<Slots>::Fill(v2) : void()), ...);
}

}  // namespace

namespace {

// A v2 table that serves a v1 plugin: entries whose signature did not change
// are the plugin's own pointers; the others go through trampolines that know
// `v1`. Throws LoadError when more v1 plugins are loaded than the adapter
// has slots for (a process loads a handful of backends at most).
const infiniCclPlugin_v2_t* AdaptV1(const infiniCclPlugin_v1_t* v1,
                                    const std::string& library_path) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int slot = 0;
  while (slot < kSlots && g_v1_tables[slot] != nullptr && g_v1_tables[slot] != v1) ++slot;
  if (slot == kSlots) {
    throw LoadError("backend plugin " + library_path + " implements plugin ABI version 1, and " +
                    std::to_string(kSlots) +
                    " version-1 plugins are loaded already (rebuild it against plugin_abi.h for "
                    "version 2)");
  }
  if (g_v1_tables[slot] == v1) return &g_v2_tables[slot];
  g_v1_tables[slot] = v1;

  infiniCclPlugin_v2_t& v2 = g_v2_tables[slot];
  v2 = infiniCclPlugin_v2_t{};
  v2.struct_size = sizeof(v2);
  v2.abi_version = INFINI_CCL_PLUGIN_ABI_VERSION_V2;
  v2.name = v1->name;
  v2.get_version = v1->get_version;
  v2.get_error_string = v1->get_error_string;
  v2.get_last_error = v1->get_last_error;
  // What v1's header promised every plugin.
  v2.features = INFINI_CCL_FEATURE_NONBLOCKING | INFINI_CCL_FEATURE_CONCURRENT_INIT |
                INFINI_CCL_FEATURE_ABORT_UNBLOCKS;
  v2.device_type = v1->device_type;
  v2.device_vendor = v1->device_type == kDLCPU ? "host" : "unknown";
  v2.device_kind = v1->device_type == kDLCPU ? "CPU" : "device";
  // v1 plugins honoured CUDA_VISIBLE_DEVICES when they drove CUDA devices.
  v2.visible_devices_env = v1->device_type == kDLCUDA ? "CUDA_VISIBLE_DEVICES" : nullptr;
  v2.get_device_count = v1->get_device_count;
  v2.set_device = v1->set_device;
  v2.get_device = v1->get_device;
  v2.mem_alloc = v1->mem_alloc;
  v2.mem_free = v1->mem_free;
  v2.memcpy_async = v1->memcpy_async;
  v2.memset_async = v1->memset_async;
  v2.stream_create = v1->stream_create;
  v2.stream_destroy = v1->stream_destroy;
  v2.stream_synchronize = v1->stream_synchronize;
  v2.stream_wait_event = v1->stream_wait_event;
  v2.event_create = v1->event_create;
  v2.event_destroy = v1->event_destroy;
  v2.event_record = v1->event_record;
  v2.event_query = v1->event_query;
  v2.event_synchronize = v1->event_synchronize;
  v2.event_elapsed_ms = v1->event_elapsed_ms;
  v2.unique_id_bytes = INFINI_CCL_UNIQUE_ID_BYTES_V1;
  v2.comm_destroy = v1->comm_destroy;
  v2.comm_abort = v1->comm_abort;
  v2.comm_count = v1->comm_count;
  v2.comm_user_rank = v1->comm_user_rank;
  v2.group_start = v1->group_start;
  v2.group_end = v1->group_end;
  v2.all_reduce = v1->all_reduce;
  v2.broadcast = v1->broadcast;
  v2.reduce = v1->reduce;
  v2.all_gather = v1->all_gather;
  v2.reduce_scatter = v1->reduce_scatter;
  v2.send = v1->send;
  v2.recv = v1->recv;
  v2.all_to_all = v1->all_to_all;
  v2.barrier = v1->barrier;
  // A v1 table may end before the optional capture entries: never read past
  // the plugin's struct_size.
  if (v1->struct_size >= INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v1_t, graph_destroy)) {
    v2.stream_begin_capture = v1->stream_begin_capture;
    v2.stream_end_capture = v1->stream_end_capture;
    v2.graph_launch = v1->graph_launch;
    v2.graph_destroy = v1->graph_destroy;
  }
  FillSlot(slot, v2, std::make_integer_sequence<int, kSlots>{});
  return &v2;
}

}  // namespace

const infiniCclPlugin_t* ReadV1Table(const void* symbol, const std::string& library_path) {
  const auto* table = static_cast<const infiniCclPlugin_v1_t*>(symbol);
  ValidateV1Table(*table, library_path);
  return AdaptV1(table, library_path);
}

}  // namespace infini::ccl::internal
