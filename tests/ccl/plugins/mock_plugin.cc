// A host-memory plugin for one rank, built in several deliberately broken
// variants (compile definitions) to test the loader, and intact to test that
// the C++ API refuses bad arguments before calling into a plugin.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "infini/ccl/plugin_abi.h"
#include "infini/ccl/plugin_profiler_v1.h"

// Variants: MOCK_V1 builds a version-1 plugin (loaded through the adapter);
// otherwise a version-2 one. MOCK_ABI_VERSION and MOCK_STRUCT_SIZE lie in
// the table's header; MOCK_NEWER_HEADER exports a v2 table from a "newer"
// header with entries after ours; MOCK_V3_ONLY exports only a version the
// host does not know; MOCK_PRE_SHRINK has comm_shrink and comm_revoke but a
// struct_size from a header that ended at init (so the host must not read
// them); MOCK_LIAR_SHRINK's comm_shrink gives a communicator with a rank
// it cannot have; MOCK_HALF_REGISTER has comm_register without
// comm_deregister, MOCK_HALF_WINDOW comm_window_register without
// comm_window_deregister, MOCK_HALF_HOST_REGISTER host_register without
// host_unregister, MOCK_HALF_HOST_FLAG host_flag_create and
// stream_wait_host_flag without host_flag_destroy (the host must refuse
// the table). MOCK_NO_GROUP
// has no group entries; MOCK_FEATURES overrides the declared features and
// MOCK_NO_ABORT leaves comm_abort NULL (declared-but-missing tables).
#ifdef MOCK_V1
using MockTable = infiniCclPlugin_v1_t;
#define MOCK_DEFAULT_VERSION INFINI_CCL_PLUGIN_ABI_VERSION_V1
#else
// A table from a future header: ours, then entries we do not know.
struct NewerTable {
  infiniCclPlugin_v2_t v2;
  infiniCclResult_t (*future_entry)(void);
  uint64_t future_flags;
};
using MockTable = infiniCclPlugin_v2_t;
#define MOCK_DEFAULT_VERSION INFINI_CCL_PLUGIN_ABI_VERSION_V2
#endif
#ifndef MOCK_ABI_VERSION
#define MOCK_ABI_VERSION MOCK_DEFAULT_VERSION
#endif
#if defined(MOCK_PRE_SHRINK) && !defined(MOCK_STRUCT_SIZE)
#define MOCK_STRUCT_SIZE INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, init)
#endif
#ifndef MOCK_STRUCT_SIZE
#ifdef MOCK_NEWER_HEADER
#define MOCK_STRUCT_SIZE sizeof(NewerTable)
#else
#define MOCK_STRUCT_SIZE sizeof(MockTable)
#endif
#endif

namespace {

int g_calls = 0;  // collective calls that reached the plugin
int g_last_blocking = -1;
char g_last_vendor_options[256] = "";
int g_init_calls = 0;           // process-wide init entry calls
char g_init_options[256] = "";  // what init received: "k=v;...|rank,count,local,local_count"
thread_local const char* g_last_error = "";

// comm_destroy and comm_abort calls that reached the plugin.
int g_destroy_calls = 0;

infiniCclResult_t Fail(const char* why) {
  g_last_error = why;
  return infiniCclInvalidUsage;
}

struct MockComm {
  int rank = 0;
};

infiniCclResult_t GetVersion(const char** version) {
  *version = "mock 1.0";
  return infiniCclSuccess;
}
const char* ErrorString(infiniCclResult_t) { return "mock error"; }
const char* LastError() { return g_last_error; }
infiniCclResult_t DeviceCount(int* count) {
  *count = 1;
  return infiniCclSuccess;
}
infiniCclResult_t SetDevice(int) { return infiniCclSuccess; }
infiniCclResult_t GetDevice(int* device) {
  *device = 0;
  return infiniCclSuccess;
}
infiniCclResult_t MemAlloc(void** ptr, size_t bytes) {
  *ptr = bytes == 0 ? nullptr : std::malloc(bytes);
  return infiniCclSuccess;
}
infiniCclResult_t MemFree(void* ptr) {
  std::free(ptr);
  return infiniCclSuccess;
}
infiniCclResult_t Memcpy(void* dst, const void* src, size_t bytes, infiniCclMemcpyKind_t,
                         infiniCclStream_t) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return infiniCclSuccess;
}
infiniCclResult_t Memset(void* ptr, int value, size_t bytes, infiniCclStream_t) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  return infiniCclSuccess;
}
infiniCclResult_t StreamCreate(infiniCclStream_t* stream) {
  *stream = nullptr;
  return infiniCclSuccess;
}
infiniCclResult_t StreamOp(infiniCclStream_t) { return infiniCclSuccess; }
infiniCclResult_t StreamWait(infiniCclStream_t, infiniCclEvent_t) { return infiniCclSuccess; }
infiniCclResult_t EventCreate(infiniCclEvent_t* event) {
  *event = nullptr;
  return infiniCclSuccess;
}
infiniCclResult_t EventOp(infiniCclEvent_t) { return infiniCclSuccess; }
infiniCclResult_t EventRecord(infiniCclEvent_t, infiniCclStream_t) { return infiniCclSuccess; }
infiniCclResult_t EventQuery(infiniCclEvent_t, int* done) {
  *done = 1;
  return infiniCclSuccess;
}
infiniCclResult_t EventElapsed(infiniCclEvent_t, infiniCclEvent_t, float* ms) {
  *ms = 0;
  return infiniCclSuccess;
}
#ifdef MOCK_V1
infiniCclResult_t UniqueId(infiniCclUniqueId_v1* id) {
  std::memset(id->internal, 7, sizeof(id->internal));
  return infiniCclSuccess;
}
infiniCclResult_t InitRank(infiniCclComm_t* comm, int nranks, infiniCclUniqueId_v1, int rank,
                           const infiniCclConfig_v1_t* config) {
  if (nranks != 1) return Fail("mock plugin supports one rank only");
  *comm = reinterpret_cast<infiniCclComm_t>(new MockComm{rank});
  return config != nullptr && config->blocking == 0 ? infiniCclInProgress : infiniCclSuccess;
}
infiniCclResult_t Split(infiniCclComm_t, int, int, infiniCclComm_t* newcomm,
                        const infiniCclConfig_v1_t*) {
  *newcomm = nullptr;
  return infiniCclSuccess;
}
infiniCclResult_t AsyncError(infiniCclComm_t, infiniCclResult_t* error) {
  *error = infiniCclSuccess;
  return infiniCclSuccess;
}
#else
constexpr size_t kMockIdBytes = 4108;  // as large as HCCL's root info
infiniCclResult_t UniqueId(void* id, const infiniCclBootstrap_t*) {
  std::memset(id, 7, kMockIdBytes);
  return infiniCclSuccess;
}
infiniCclResult_t InitRank(infiniCclComm_t* comm, int nranks, const void* id, int rank,
                           const infiniCclConfig_t* config, const infiniCclBootstrap_t*) {
  if (nranks != 1) return Fail("mock plugin supports one rank only");
  const auto* bytes = static_cast<const unsigned char*>(id);
  if (bytes[0] != 7 || bytes[kMockIdBytes - 1] != 7) return Fail("mock: the id arrived damaged");
  g_last_blocking = config != nullptr ? config->blocking : -1;
  g_last_vendor_options[0] = '\0';
  for (const infiniCclExtension_t* extension = config != nullptr ? config->extensions : nullptr;
       extension != nullptr; extension = extension->next) {
    if (extension->type != infiniCclExtensionVendorOptions) continue;
    const auto* options = reinterpret_cast<const infiniCclVendorOptions_t*>(extension);
    if (std::strcmp(options->backend, "mock") != 0) continue;
    for (size_t i = 0; i < options->count; ++i) {
      std::strncat(g_last_vendor_options, options->keys[i],
                   sizeof(g_last_vendor_options) - std::strlen(g_last_vendor_options) - 1);
      std::strncat(g_last_vendor_options, "=",
                   sizeof(g_last_vendor_options) - std::strlen(g_last_vendor_options) - 1);
      std::strncat(g_last_vendor_options, options->values[i],
                   sizeof(g_last_vendor_options) - std::strlen(g_last_vendor_options) - 1);
      std::strncat(g_last_vendor_options, ";",
                   sizeof(g_last_vendor_options) - std::strlen(g_last_vendor_options) - 1);
    }
  }
  *comm = reinterpret_cast<infiniCclComm_t>(new MockComm{rank});
  // Like a non-blocking NCCL communicator: the handle exists, setup goes on;
  // an unset field is the default (blocking), never "0".
  return config != nullptr && config->blocking == 0 ? infiniCclInProgress : infiniCclSuccess;
}
infiniCclResult_t Split(infiniCclComm_t, int, int, infiniCclComm_t* newcomm,
                        const infiniCclConfig_t*) {
  *newcomm = nullptr;
  return infiniCclSuccess;
}
infiniCclResult_t AsyncError(infiniCclComm_t, infiniCclResult_t* error, const char** message) {
  *error = infiniCclSuccess;
  if (message != nullptr) *message = "mock: all is well";
  return infiniCclSuccess;
}
// A one-rank world shrinks only to a copy of itself; the host checks it.
infiniCclResult_t Shrink(infiniCclComm_t comm, const int32_t*, int32_t excluded_count,
                         const infiniCclConfig_t*, int32_t, infiniCclComm_t* new_comm) {
  ++g_calls;
  if (excluded_count != 0) return Fail("mock: a one-rank communicator has no one to exclude");
#ifdef MOCK_LIAR_SHRINK
  (void)comm;
  *new_comm = reinterpret_cast<infiniCclComm_t>(new MockComm{7});  // a rank it cannot have
#else
  *new_comm =
      reinterpret_cast<infiniCclComm_t>(new MockComm{reinterpret_cast<MockComm*>(comm)->rank});
#endif
  return infiniCclSuccess;
}
infiniCclResult_t Revoke(infiniCclComm_t) {
  ++g_calls;
  return infiniCclSuccess;
}
// No average, and nothing but float32 and int32 for reductions: what an
// HCCL-like library declares.
int Supports(infiniCclCollective_t collective, DLDataType dtype, infiniCclRedOp_t op) {
  if (!infiniCclCollectiveReduces(collective)) return 1;
  const bool float32 = dtype.code == kDLFloat && dtype.bits == 32;
  const bool int32 = dtype.code == kDLInt && dtype.bits == 32;
  return (float32 || int32) && op != infiniCclAvg ? 1 : 0;
}
#endif
infiniCclResult_t Destroy(infiniCclComm_t comm) {
  ++g_destroy_calls;
  delete reinterpret_cast<MockComm*>(comm);
  return infiniCclSuccess;
}
infiniCclResult_t Count(infiniCclComm_t, int* nranks) {
#ifdef MOCK_LIAR_COUNT
  *nranks = 3;  // a liar: asked for one rank, claims a larger communicator
#else
  *nranks = 1;
#endif
  return infiniCclSuccess;
}
infiniCclResult_t UserRank(infiniCclComm_t comm, int* rank) {
  *rank = reinterpret_cast<MockComm*>(comm)->rank;
  return infiniCclSuccess;
}
[[maybe_unused]] infiniCclResult_t Group() { return infiniCclSuccess; }
[[maybe_unused]] infiniCclResult_t AllReduce(const void*, void*, size_t, DLDataType,
                                             infiniCclRedOp_t, infiniCclComm_t, infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
infiniCclResult_t Broadcast(const void*, void*, size_t, DLDataType, int, infiniCclComm_t,
                            infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
infiniCclResult_t Reduce(const void*, void*, size_t, DLDataType, infiniCclRedOp_t, int,
                         infiniCclComm_t, infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
infiniCclResult_t Gather(const void*, void*, size_t, DLDataType, infiniCclComm_t,
                         infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
infiniCclResult_t ReduceScatter(const void*, void*, size_t, DLDataType, infiniCclRedOp_t,
                                infiniCclComm_t, infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
infiniCclResult_t Send(const void*, size_t, DLDataType, int, infiniCclComm_t, infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
infiniCclResult_t Recv(void*, size_t, DLDataType, int, infiniCclComm_t, infiniCclStream_t) {
  ++g_calls;
  return infiniCclSuccess;
}
[[maybe_unused]] infiniCclResult_t Barrier(infiniCclComm_t, infiniCclStream_t) {
  ++g_calls;
  return Fail("mock barrier always fails, so tests see the plugin's text");
}

// Records what the host passed; an option "refuse" makes init fail, so
// tests see the plugin refused at load.
[[maybe_unused]] infiniCclResult_t Init(const infiniCclPluginInit_t* init) {
  ++g_init_calls;
  std::string seen;
  for (size_t i = 0; i < init->option_count; ++i) {
    if (std::strcmp(init->option_keys[i], "refuse") == 0) {
      return Fail("mock: init refused (option refuse)");
    }
    seen += std::string(init->option_keys[i]) + "=" + init->option_values[i] + ";";
  }
  seen += "|" + std::to_string(init->process_rank) + "," + std::to_string(init->process_count) +
          "," + std::to_string(init->local_process_rank) + "," +
          std::to_string(init->local_process_count);
  std::snprintf(g_init_options, sizeof(g_init_options), "%s", seen.c_str());
  return infiniCclSuccess;
}

}  // namespace

extern "C" {

// Lets a test see how many collective calls reached the plugin.
__attribute__((visibility("default"))) int mock_plugin_collective_calls() { return g_calls; }
// How many communicators were destroyed or aborted through the plugin.
__attribute__((visibility("default"))) int mock_plugin_destroy_calls() { return g_destroy_calls; }
// The last config's blocking field and this backend's vendor options, as the
// plugin saw them.
__attribute__((visibility("default"))) int mock_plugin_last_blocking() { return g_last_blocking; }
__attribute__((visibility("default"))) const char* mock_plugin_last_vendor_options() {
  return g_last_vendor_options;
}
// How often the process-wide init entry ran, and what it received.
__attribute__((visibility("default"))) int mock_plugin_init_calls() { return g_init_calls; }
__attribute__((visibility("default"))) const char* mock_plugin_init_options() {
  return g_init_options;
}

}  // extern "C"

#ifdef MOCK_V1

#ifdef MOCK_NO_SYMBOL
#define MOCK_TABLE_NAME infiniCclPlugin_V1  // misspelt on purpose
#else
#define MOCK_TABLE_NAME infiniCclPlugin_v1
#endif
INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v1_t MOCK_TABLE_NAME = {MOCK_STRUCT_SIZE,
                                                                       MOCK_ABI_VERSION,
                                                                       "mock_v1",
                                                                       GetVersion,
                                                                       ErrorString,
                                                                       LastError,
                                                                       kDLCPU,
                                                                       DeviceCount,
                                                                       SetDevice,
                                                                       GetDevice,
                                                                       MemAlloc,
                                                                       MemFree,
                                                                       Memcpy,
                                                                       Memset,
                                                                       StreamCreate,
                                                                       StreamOp,
                                                                       StreamOp,
                                                                       StreamWait,
                                                                       EventCreate,
                                                                       EventOp,
                                                                       EventRecord,
                                                                       EventQuery,
                                                                       EventOp,
                                                                       EventElapsed,
                                                                       UniqueId,
                                                                       InitRank,
                                                                       Split,
                                                                       Destroy,
                                                                       Destroy,
                                                                       AsyncError,
                                                                       Count,
                                                                       UserRank,
                                                                       Group,
                                                                       Group,
                                                                       AllReduce,
                                                                       Broadcast,
                                                                       Reduce,
                                                                       Gather,
                                                                       ReduceScatter,
                                                                       Send,
                                                                       Recv,
                                                                       /*all_to_all=*/nullptr,
#ifdef MOCK_NULL_BARRIER
                                                                       /*barrier=*/nullptr,
#else
                                                                       Barrier,
#endif
                                                                       nullptr,
                                                                       nullptr,
                                                                       nullptr,
                                                                       nullptr};

#else

#ifdef MOCK_NO_SYMBOL
#define MOCK_TABLE_NAME infiniCclPlugin_V2  // misspelt on purpose
#elif defined(MOCK_V3_ONLY)
#define MOCK_TABLE_NAME infiniCclPlugin_v3
#else
#define MOCK_TABLE_NAME infiniCclPlugin_v2
#endif

#define MOCK_V2_TABLE                                                                             \
  {                                                                                               \
    .struct_size = MOCK_STRUCT_SIZE, .abi_version = MOCK_ABI_VERSION, .name = "mock",             \
    .get_version = GetVersion, .get_error_string = ErrorString, .get_last_error = LastError,      \
    .features = MOCK_FEATURES, .supports = Supports, .device_type = kDLCPU,                       \
    .device_vendor = "host", .device_kind = "CPU", .visible_devices_env = "MOCK_VISIBLE_DEVICES", \
    .get_device_count = DeviceCount, .set_device = SetDevice, .get_device = GetDevice,            \
    .mem_alloc = MemAlloc, .mem_free = MemFree, .memcpy_async = Memcpy, .memset_async = Memset,   \
    .stream_create = StreamCreate, .stream_destroy = StreamOp, .stream_synchronize = StreamOp,    \
    .stream_wait_event = StreamWait, .event_create = EventCreate, .event_destroy = EventOp,       \
    .event_record = EventRecord, .event_query = EventQuery, .event_synchronize = EventOp,         \
    .event_elapsed_ms = EventElapsed, .unique_id_bytes = kMockIdBytes, .get_unique_id = UniqueId, \
    .comm_init_rank = InitRank, .comm_init_ranks = nullptr, .comm_split = Split,                  \
    .comm_destroy = Destroy, .comm_abort = MOCK_ABORT, .comm_get_async_error = AsyncError,        \
    .comm_count = Count, .comm_user_rank = UserRank, .group_start = MOCK_GROUP,                   \
    .group_end = MOCK_GROUP, .all_reduce = MOCK_ALL_REDUCE, .broadcast = Broadcast,               \
    .reduce = Reduce, .all_gather = Gather, .reduce_scatter = ReduceScatter, .send = Send,        \
    .recv = Recv, .all_to_all = nullptr, .barrier = Barrier, .all_to_all_v = nullptr,             \
    .all_gather_v = nullptr, .reduce_scatter_v = nullptr, .gather = nullptr, .scatter = nullptr,  \
    .stream_begin_capture = nullptr, .stream_end_capture = nullptr, .graph_launch = nullptr,      \
    .graph_destroy = nullptr, .init = Init, .comm_shrink = Shrink, .comm_revoke = Revoke,         \
    .comm_register = MOCK_REGISTER, .comm_deregister = nullptr,                                   \
    .comm_window_register = MOCK_WINDOW_REGISTER, .comm_window_deregister = nullptr,              \
    .get_link_bandwidth = nullptr, .host_register = MOCK_HOST_REGISTER,                           \
    .host_unregister = nullptr, .host_flag_create = MOCK_HOST_FLAG_CREATE,                        \
    .host_flag_destroy = nullptr, .stream_wait_host_flag = MOCK_STREAM_WAIT_HOST_FLAG,            \
    .stream_write_host_flag = MOCK_STREAM_WRITE_HOST_FLAG                                         \
  }
#ifdef MOCK_HALF_REGISTER
infiniCclResult_t HalfRegister(infiniCclComm_t, void*, size_t, void**) { return infiniCclSuccess; }
#define MOCK_REGISTER HalfRegister
#else
#define MOCK_REGISTER nullptr
#endif
#ifdef MOCK_HALF_WINDOW
infiniCclResult_t HalfWindow(infiniCclComm_t, void*, size_t, uint32_t, void**) {
  return infiniCclSuccess;
}
#define MOCK_WINDOW_REGISTER HalfWindow
#else
#define MOCK_WINDOW_REGISTER nullptr
#endif
#ifdef MOCK_HALF_HOST_REGISTER
infiniCclResult_t HalfHostRegister(void*, size_t) { return infiniCclSuccess; }
#define MOCK_HOST_REGISTER HalfHostRegister
#else
#define MOCK_HOST_REGISTER nullptr
#endif
#ifdef MOCK_HALF_HOST_FLAG
infiniCclResult_t HalfFlagCreate(uint32_t**) { return infiniCclSuccess; }
infiniCclResult_t HalfWaitFlag(infiniCclStream_t, const uint32_t*, uint32_t) {
  return infiniCclSuccess;
}
#define MOCK_HOST_FLAG_CREATE HalfFlagCreate
#define MOCK_STREAM_WAIT_HOST_FLAG HalfWaitFlag
#else
#define MOCK_HOST_FLAG_CREATE nullptr
#define MOCK_STREAM_WAIT_HOST_FLAG nullptr
#endif
#ifdef MOCK_LONE_HOST_FLAG_WRITE
infiniCclResult_t LoneWriteFlag(infiniCclStream_t, uint32_t*, uint32_t) { return infiniCclSuccess; }
#define MOCK_STREAM_WRITE_HOST_FLAG LoneWriteFlag
#else
#define MOCK_STREAM_WRITE_HOST_FLAG nullptr
#endif
#ifndef MOCK_FEATURES
#define MOCK_FEATURES INFINI_CCL_FEATURE_NONBLOCKING
#endif
#ifdef MOCK_NO_ABORT
#define MOCK_ABORT nullptr
#else
#define MOCK_ABORT Destroy
#endif
#ifdef MOCK_NO_GROUP
#define MOCK_GROUP nullptr
#else
#define MOCK_GROUP Group
#endif
#ifdef MOCK_NULL_ALL_REDUCE
#define MOCK_ALL_REDUCE nullptr
#else
#define MOCK_ALL_REDUCE AllReduce
#endif

#ifdef MOCK_BAD_PROFILER
INFINI_CCL_PLUGIN_EXPORT const infiniCclProfiler_v1_t infiniCclProfiler_v1 = {
    .struct_size = sizeof(infiniCclProfiler_v1_t), .version = 7, .set_callback = nullptr};
#endif

#ifdef MOCK_NEWER_HEADER
INFINI_CCL_PLUGIN_EXPORT const NewerTable MOCK_TABLE_NAME = {MOCK_V2_TABLE, nullptr, 0};
#else
INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t MOCK_TABLE_NAME = MOCK_V2_TABLE;
#endif

#endif
