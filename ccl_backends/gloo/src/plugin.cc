// The exported table (infiniCclPlugin_v2): information, capabilities and
// the device description here; the entries live in comm_entries.cc,
// collective_entries.cc and device_runtime.cc.
#include <gloo/config.h>

#include "device_runtime.h"
#include "entries.h"
#include "errors.h"
#include "infini/ccl/plugin_abi.h"
#include "reduce_kernels.h"
#include "unique_id.h"

namespace infini::gloo_backend {
namespace {

#define INFINI_GLOO_STRINGIFY2(x) #x
#define INFINI_GLOO_STRINGIFY(x) INFINI_GLOO_STRINGIFY2(x)
constexpr const char* kVersion =
    "gloo " INFINI_GLOO_STRINGIFY(GLOO_VERSION_MAJOR) "." INFINI_GLOO_STRINGIFY(
        GLOO_VERSION_MINOR) "." INFINI_GLOO_STRINGIFY(GLOO_VERSION_PATCH) " (TCP transport)";

// ---- Information ----------------------------------------------------------

infiniCclResult_t GetVersion(const char** version) {
  return Guarded("get_version", [&] {
    RequireArgument(version != nullptr, "version is NULL");
    *version = kVersion;
    return infiniCclSuccess;
  });
}

const char* GetErrorString(infiniCclResult_t result) {
  switch (result) {
    case infiniCclSuccess:
      return "no error";
    case infiniCclUnhandledDeviceError:
      return "device runtime error";
    case infiniCclSystemError:
      return "system error (a system call or the network failed)";
    case infiniCclInternalError:
      return "internal error in the gloo plugin or gloo";
    case infiniCclInvalidArgument:
      return "invalid argument";
    case infiniCclInvalidUsage:
      return "invalid usage (check the configuration)";
    case infiniCclRemoteError:
      return "remote error (a peer failed or went away)";
    case infiniCclInProgress:
      return "operation in progress";
    case infiniCclTimeout:
      return "timed out";
    case infiniCclAborted:
      return "communicator aborted";
    case infiniCclUnsupported:
      return "not supported by the gloo backend";
    default:
      return "unknown result code";
  }
}

const char* GetLastError() { return LastError(); }

// ---- Capabilities -----------------------------------------------------------

// Every rank calls comm_init_rank on its own thread (gloo meets through a
// store), comm_abort signals every pair, and the host is every rank's device.
constexpr uint64_t kFeatures = INFINI_CCL_FEATURE_CONCURRENT_INIT |
                               INFINI_CCL_FEATURE_ABORT_UNBLOCKS |
                               INFINI_CCL_FEATURE_DEVICE_SHARING;

bool IsMovable(DLDataType dtype) noexcept {
  try {
    MovableElementBytes(dtype);
    return true;
  } catch (...) {
    return false;
  }
}

// Reductions: the types and operators gloo's kernels have; everything else
// moves any type of whole bytes. Which collectives reduce, the ABI says.
int Supports(infiniCclCollective_t collective, DLDataType dtype, infiniCclRedOp_t op) {
  const int index = static_cast<int>(collective);
  if (index < 0 || index >= infiniCclNumCollectives) return 0;  // newer than this plugin
  if (collective == infiniCclCollBarrier) return 1;
  if (infiniCclCollectiveReduces(collective)) return SupportsReduction(dtype, op) ? 1 : 0;
  return IsMovable(dtype) ? 1 : 0;
}

}  // namespace
}  // namespace infini::gloo_backend

namespace gb = infini::gloo_backend;

INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t infiniCclPlugin_v2 = {
    .struct_size = sizeof(infiniCclPlugin_v2_t),
    .abi_version = INFINI_CCL_PLUGIN_ABI_VERSION_V2,
    .name = "gloo",
    .get_version = gb::GetVersion,
    .get_error_string = gb::GetErrorString,
    .get_last_error = gb::GetLastError,
    .features = gb::kFeatures,
    .supports = gb::Supports,
    .device_type = kDLCPU,
    .device_vendor = "host",
    .device_kind = "CPU",
    .visible_devices_env = nullptr,
    .get_device_count = gb::GetDeviceCount,
    .set_device = gb::SetDevice,
    .get_device = gb::GetDevice,
    .mem_alloc = gb::MemAlloc,
    .mem_free = gb::MemFree,
    .memcpy_async = gb::MemcpyAsync,
    .memset_async = gb::MemsetAsync,
    .stream_create = gb::StreamCreate,
    .stream_destroy = gb::StreamDestroy,
    .stream_synchronize = gb::StreamSynchronize,
    .stream_wait_event = gb::StreamWaitEvent,
    .event_create = gb::EventCreate,
    .event_destroy = gb::EventDestroy,
    .event_record = gb::EventRecord,
    .event_query = gb::EventQuery,
    .event_synchronize = gb::EventSynchronize,
    .event_elapsed_ms = gb::EventElapsedMs,
    .unique_id_bytes = gb::kUniqueIdBytes,
    .get_unique_id = gb::GetUniqueIdEntry,
    .comm_init_rank = gb::CommInitRankEntry,
    .comm_init_ranks = gb::CommInitRanksEntry,
    .comm_split = gb::CommSplitEntry,
    .comm_destroy = gb::CommDestroyEntry,
    .comm_abort = gb::CommAbortEntry,
    .comm_get_async_error = gb::CommGetAsyncErrorEntry,
    .comm_count = gb::CommCountEntry,
    .comm_user_rank = gb::CommUserRankEntry,
    .group_start = gb::GroupStartEntry,
    .group_end = gb::GroupEndEntry,
    .all_reduce = gb::AllReduceEntry,
    .broadcast = gb::BroadcastEntry,
    .reduce = gb::ReduceEntry,
    .all_gather = gb::AllGatherEntry,
    .reduce_scatter = gb::ReduceScatterEntry,
    .send = gb::SendEntry,
    .recv = gb::RecvEntry,
    .all_to_all = gb::AllToAllEntry,
    .barrier = gb::BarrierEntry,
    .all_to_all_v = gb::AllToAllVEntry,
    .all_gather_v = gb::AllGatherVEntry,
    .reduce_scatter_v = gb::ReduceScatterVEntry,
    .gather = gb::GatherEntry,
    .scatter = gb::ScatterEntry,
    // Work is synchronous on the host: there is nothing to capture.
    .stream_begin_capture = nullptr,
    .stream_end_capture = nullptr,
    .graph_launch = nullptr,
    .graph_destroy = nullptr,
    .init = nullptr,  // gloo's settings are per communicator (vendor options)
    .comm_shrink = gb::CommShrinkEntry,
    .comm_revoke = gb::CommRevokeEntry,
    // Host memory needs no registration.
    .comm_register = nullptr,
    .comm_deregister = nullptr,
    .comm_window_register = nullptr,
    .comm_window_deregister = nullptr,
    // No line rate to report for loopback TCP: ccl_bench keeps its table.
    .get_link_bandwidth = nullptr,
    .host_register = nullptr,  // host buffers are its device memory
    .host_unregister = nullptr,
    .host_flag_create = nullptr,
    .host_flag_destroy = nullptr,
    .stream_wait_host_flag = nullptr,
    .stream_write_host_flag = nullptr,
};
