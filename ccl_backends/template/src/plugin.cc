// The porting template: a plugin of ABI v2 that loads and declares nothing.
//
// Copy this folder to ccl_backends/<name>/, set kName, and replace each
// NotImplemented(...) with a call into your library, in the order of
// docs/porting.md (the step is in each message). After each step,
//   ccl_info --ccl_backend=<path to your .so> --capabilities
//   infini_run --nproc_per_node=2 -- ccl_conformance --ccl_backend=<name>
// show what works and what is left. Optional entries are NULL here: fill
// them in when your library has the call (docs/porting.md says which
// library has which), and the conformance suite starts judging them.
#include <cstring>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace {

// The NAME of libinfini_ccl_NAME.so, and the prefix of every message.
constexpr const char* kName = "template";

// get_last_error()'s text: per thread, as the ABI requires.
thread_local std::string t_last_error;

// Every required entry not yet written: one line saying what to write,
// where, and which step of docs/porting.md explains it.
infiniCclResult_t NotImplemented(const char* entry, int step) {
  t_last_error = std::string(kName) + ": implement " + entry +
                 " (plugin.cc) — see docs/porting.md step " + std::to_string(step);
  return infiniCclUnsupported;
}

// ---- Information and errors (step 1: these already work) ------------------

infiniCclResult_t GetVersion(const char** version) {
  // Step 1: your library's version, e.g. "HCCL 8.0.0".
  *version = "template 0 (no vendor library yet)";
  return infiniCclSuccess;
}

const char* GetErrorString(infiniCclResult_t result) {
  switch (result) {
    case infiniCclSuccess:
      return "success";
    case infiniCclUnhandledDeviceError:
      return "device runtime error";
    case infiniCclSystemError:
      return "system error";
    case infiniCclInternalError:
      return "internal error";
    case infiniCclInvalidArgument:
      return "invalid argument";
    case infiniCclInvalidUsage:
      return "invalid usage";
    case infiniCclRemoteError:
      return "remote error";
    case infiniCclInProgress:
      return "in progress";
    case infiniCclTimeout:
      return "timeout";
    case infiniCclAborted:
      return "aborted";
    case infiniCclUnsupported:
      return "unsupported";
    default:
      return "unknown result";
  }
}

const char* GetLastError() { return t_last_error.c_str(); }

// Step 4: answer 1 for each type (and, for a reduction, operator) your
// library computes. The ABI says which collectives reduce
// (infiniCclCollectiveReduces), so supports() judges only types and
// operators, and a collective added to the ABI needs no edit here. Nothing yet.
bool Reducible(DLDataType, infiniCclRedOp_t) { return false; }  // e.g. float32 with sum
bool Movable(DLDataType) { return false; }                      // e.g. any type of whole bytes

int Supports(infiniCclCollective_t collective, DLDataType dtype, infiniCclRedOp_t op) {
  const int index = static_cast<int>(collective);
  if (index < 0 || index >= infiniCclNumCollectives) return 0;  // newer than this plugin
  if (infiniCclCollectiveReduces(collective)) return Reducible(dtype, op) ? 1 : 0;
  return Movable(dtype) ? 1 : 0;
}

// ---- Device runtime (step 2) ------------------------------------------------

infiniCclResult_t GetDeviceCount(int*) { return NotImplemented("get_device_count", 2); }
infiniCclResult_t SetDevice(int) { return NotImplemented("set_device", 2); }
infiniCclResult_t GetDevice(int*) { return NotImplemented("get_device", 2); }
infiniCclResult_t MemAlloc(void**, size_t) { return NotImplemented("mem_alloc", 2); }
infiniCclResult_t MemFree(void* ptr) {
  if (ptr == nullptr) return infiniCclSuccess;  // NULL is ignored, as the ABI says
  return NotImplemented("mem_free", 2);
}
infiniCclResult_t MemcpyAsync(void*, const void*, size_t, infiniCclMemcpyKind_t,
                              infiniCclStream_t) {
  return NotImplemented("memcpy_async", 2);
}
infiniCclResult_t MemsetAsync(void*, int, size_t, infiniCclStream_t) {
  return NotImplemented("memset_async", 2);
}
infiniCclResult_t StreamCreate(infiniCclStream_t*) { return NotImplemented("stream_create", 2); }
infiniCclResult_t StreamDestroy(infiniCclStream_t) { return NotImplemented("stream_destroy", 2); }
infiniCclResult_t StreamSynchronize(infiniCclStream_t) {
  return NotImplemented("stream_synchronize", 2);
}
infiniCclResult_t StreamWaitEvent(infiniCclStream_t, infiniCclEvent_t) {
  return NotImplemented("stream_wait_event", 2);
}
infiniCclResult_t EventCreate(infiniCclEvent_t*) { return NotImplemented("event_create", 2); }
infiniCclResult_t EventDestroy(infiniCclEvent_t) { return NotImplemented("event_destroy", 2); }
infiniCclResult_t EventRecord(infiniCclEvent_t, infiniCclStream_t) {
  return NotImplemented("event_record", 2);
}
infiniCclResult_t EventQuery(infiniCclEvent_t, int*) { return NotImplemented("event_query", 2); }
infiniCclResult_t EventSynchronize(infiniCclEvent_t) {
  return NotImplemented("event_synchronize", 2);
}
infiniCclResult_t EventElapsedMs(infiniCclEvent_t, infiniCclEvent_t, float*) {
  return NotImplemented("event_elapsed_ms", 2);
}

// ---- Communicators (step 3) --------------------------------------------------

infiniCclResult_t GetUniqueId(void*, const infiniCclBootstrap_t*) {
  return NotImplemented("get_unique_id", 3);
}
infiniCclResult_t CommInitRank(infiniCclComm_t*, int, const void*, int, const infiniCclConfig_t*,
                               const infiniCclBootstrap_t*) {
  return NotImplemented("comm_init_rank", 3);
}
infiniCclResult_t CommDestroy(infiniCclComm_t) { return NotImplemented("comm_destroy", 3); }
infiniCclResult_t CommGetAsyncError(infiniCclComm_t, infiniCclResult_t*, const char**) {
  return NotImplemented("comm_get_async_error", 3);
}
infiniCclResult_t CommCount(infiniCclComm_t, int*) { return NotImplemented("comm_count", 3); }
infiniCclResult_t CommUserRank(infiniCclComm_t, int*) {
  return NotImplemented("comm_user_rank", 3);
}

// ---- Collectives (step 4) ----------------------------------------------------

infiniCclResult_t AllReduce(const void*, void*, size_t, DLDataType, infiniCclRedOp_t,
                            infiniCclComm_t, infiniCclStream_t) {
  return NotImplemented("all_reduce", 4);
}
infiniCclResult_t Broadcast(const void*, void*, size_t, DLDataType, int, infiniCclComm_t,
                            infiniCclStream_t) {
  return NotImplemented("broadcast", 4);
}
infiniCclResult_t Reduce(const void*, void*, size_t, DLDataType, infiniCclRedOp_t, int,
                         infiniCclComm_t, infiniCclStream_t) {
  return NotImplemented("reduce", 4);
}
infiniCclResult_t AllGather(const void*, void*, size_t, DLDataType, infiniCclComm_t,
                            infiniCclStream_t) {
  return NotImplemented("all_gather", 4);
}
infiniCclResult_t ReduceScatter(const void*, void*, size_t, DLDataType, infiniCclRedOp_t,
                                infiniCclComm_t, infiniCclStream_t) {
  return NotImplemented("reduce_scatter", 4);
}
infiniCclResult_t Send(const void*, size_t, DLDataType, int, infiniCclComm_t, infiniCclStream_t) {
  return NotImplemented("send", 4);
}
infiniCclResult_t Recv(void*, size_t, DLDataType, int, infiniCclComm_t, infiniCclStream_t) {
  return NotImplemented("recv", 4);
}

}  // namespace

INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t infiniCclPlugin_v2 = {
    .struct_size = sizeof(infiniCclPlugin_v2_t),
    .abi_version = INFINI_CCL_PLUGIN_ABI_VERSION_V2,
    .name = kName,
    .get_version = GetVersion,
    .get_error_string = GetErrorString,
    .get_last_error = GetLastError,
    // Step 5: INFINI_CCL_FEATURE_* bits your library honours.
    .features = 0,
    .supports = Supports,
    // Step 1: your device. kDLExtDev for a chip DLPack has no code for.
    .device_type = kDLExtDev,
    .device_vendor = "template",
    .device_kind = "device",
    // Step 1: your library's visibility variable, e.g. "ASCEND_RT_VISIBLE_DEVICES".
    .visible_devices_env = nullptr,
    .get_device_count = GetDeviceCount,
    .set_device = SetDevice,
    .get_device = GetDevice,
    .mem_alloc = MemAlloc,
    .mem_free = MemFree,
    .memcpy_async = MemcpyAsync,
    .memset_async = MemsetAsync,
    .stream_create = StreamCreate,
    .stream_destroy = StreamDestroy,
    .stream_synchronize = StreamSynchronize,
    .stream_wait_event = StreamWaitEvent,
    .event_create = EventCreate,
    .event_destroy = EventDestroy,
    .event_record = EventRecord,
    .event_query = EventQuery,
    .event_synchronize = EventSynchronize,
    .event_elapsed_ms = EventElapsedMs,
    // Step 3: the size of your library's id (ncclUniqueId 128, HcclRootInfo
    // 4108, cnclCliqueId 136).
    .unique_id_bytes = 128,
    .get_unique_id = GetUniqueId,
    .comm_init_rank = CommInitRank,
    // Step 3 or 5: your library's init of several devices at once
    // (cnclInitComms, HcclCommInitAll); may replace comm_init_rank.
    .comm_init_ranks = nullptr,
    .comm_split = nullptr,  // step 5: ncclCommSplit and kin
    .comm_destroy = CommDestroy,
    .comm_abort = nullptr,  // step 5
    .comm_get_async_error = CommGetAsyncError,
    .comm_count = CommCount,
    .comm_user_rank = CommUserRank,
    .group_start = nullptr,  // step 5: both or neither
    .group_end = nullptr,
    .all_reduce = AllReduce,
    .broadcast = Broadcast,
    .reduce = Reduce,
    .all_gather = AllGather,
    .reduce_scatter = ReduceScatter,
    .send = Send,
    .recv = Recv,
    // Step 5: optional collectives, when your library has them.
    .all_to_all = nullptr,
    .barrier = nullptr,
    .all_to_all_v = nullptr,
    .all_gather_v = nullptr,
    .reduce_scatter_v = nullptr,
    .gather = nullptr,
    .scatter = nullptr,
    .stream_begin_capture = nullptr,
    .stream_end_capture = nullptr,
    .graph_launch = nullptr,
    .graph_destroy = nullptr,
    // Optional: a library that reads process-wide settings once (environment
    // variables, a config file) applies the options it receives here.
    .init = nullptr,
    // Optional: recovery after a lost rank (ncclCommShrink/ncclCommRevoke,
    // MPI_Comm_shrink/MPI_Comm_revoke), when your library can; see
    // docs/porting.md.
    .comm_shrink = nullptr,
    .comm_revoke = nullptr,
    // Optional: buffer registration (ncclCommRegister/ncclCommDeregister),
    // when registered buffers make your library's collectives faster; both
    // or neither.
    .comm_register = nullptr,
    .comm_deregister = nullptr,
    // Optional: collective window registration (ncclCommWindowRegister),
    // when your library has symmetric memory; both or neither.
    .comm_window_register = nullptr,
    .comm_window_deregister = nullptr,
    // Optional: the peak link bandwidth between your devices, for
    // ccl_bench's verdict (which otherwise uses its own table).
    .get_link_bandwidth = nullptr,
    // Optional: page-lock host memory for your device's copies (the
    // vendor's cudaHostRegister), so communicators staged through the host
    // copy at full speed; both or neither.
    .host_register = nullptr,
    .host_unregister = nullptr,
    // Optional: a stream that waits for a word of host memory (the vendor's
    // cuStreamWaitValue32), so staged collectives return once enqueued;
    // all three or none.
    .host_flag_create = nullptr,
    .host_flag_destroy = nullptr,
    .stream_wait_host_flag = nullptr,
    .stream_write_host_flag = nullptr,
};
