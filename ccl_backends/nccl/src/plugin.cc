// The one exported symbol: infiniCclPlugin_v2, NCCL and the CUDA runtime
// behind the InfiniCCL plugin ABI (the host adapts v1 plugins; this one is
// v2 only).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "capabilities.h"
#include "collectives.h"
#include "communicator.h"
#include "device_runtime.h"
#include "errors.h"
#include "graphs.h"
#include "infini/ccl/plugin_abi.h"
#include "link_bandwidth.h"
#include "registration.h"
#include "variable_collectives.h"

namespace infini::ccl::nccl {
namespace {

// Wraps an implementation so that no exception crosses the C ABI.
template <auto Function>
struct Exported;

template <typename... Args, infiniCclResult_t (*Function)(Args...)>
struct Exported<Function> {
  static infiniCclResult_t Call(Args... args) noexcept {
    return Guarded("nccl plugin", [&] { return Function(args...); });
  }
};

std::string VersionText() {
  int nccl_version = 0;
  int runtime_version = 0;
  std::string text = "NCCL ";
  if (ncclGetVersion(&nccl_version) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    text += std::to_string(nccl_version / 10000) + "." + std::to_string(nccl_version / 100 % 100) +
            "." + std::to_string(nccl_version % 100);
  } else {
    text += "(unknown)";
  }
  if (cudaRuntimeGetVersion(&runtime_version) == cudaSuccess) {
    text += ", CUDA runtime " + std::to_string(runtime_version / 1000) + "." +
            std::to_string(runtime_version % 1000 / 10);
  }
  return text;
}

infiniCclResult_t GetVersion(const char** version) {
  if (version == nullptr) return Fail(infiniCclInvalidArgument, "get_version: version is NULL");
  static const std::string text = VersionText();
  *version = text.c_str();
  return infiniCclSuccess;
}

const char* GetErrorString(infiniCclResult_t result) { return ResultString(result); }
const char* GetLastError() { return LastError(); }

// NCCL's recovery calls where the library has them (set at load).
CommShrinkEntry g_shrink = nullptr;
CommRevokeEntry g_revoke = nullptr;

infiniCclResult_t Shrink(infiniCclComm_t comm, const int32_t* excluded_ranks,
                         int32_t excluded_count, const infiniCclConfig_t* config, int32_t flags,
                         infiniCclComm_t* new_comm) {
  return g_shrink(comm, excluded_ranks, excluded_count, config, flags, new_comm);
}
infiniCclResult_t Revoke(infiniCclComm_t comm) { return g_revoke(comm); }

// ncclCommRegister/ncclCommDeregister where the library has them (set at load).
RegistrationEntries g_registration;

infiniCclResult_t Register(infiniCclComm_t comm, void* buffer, size_t bytes, void** handle) {
  return g_registration.comm_register(comm, buffer, bytes, handle);
}
infiniCclResult_t Deregister(infiniCclComm_t comm, void* handle) {
  return g_registration.comm_deregister(comm, handle);
}

// ncclCommWindowRegister/Deregister where the library has them (set at load).
WindowRegistrationEntries g_window_registration;

infiniCclResult_t WindowRegister(infiniCclComm_t comm, void* buffer, size_t bytes, uint32_t flags,
                                 void** handle) {
  return g_window_registration.comm_window_register(comm, buffer, bytes, flags, handle);
}
infiniCclResult_t WindowDeregister(infiniCclComm_t comm, void* handle) {
  return g_window_registration.comm_window_deregister(comm, handle);
}

}  // namespace
}  // namespace infini::ccl::nccl

namespace nccl = infini::ccl::nccl;

// Not const: the recovery entries are filled in when the plugin is loaded
// (OfferRecoveryEntries), from what the libnccl it runs with has.
// (INFINI_CCL_PLUGIN_EXPORT's extern "C" in block form: a non-const
// definition may not be declared extern.)
extern "C" {
__attribute__((visibility("default"))) infiniCclPlugin_v2_t infiniCclPlugin_v2 = {
    .struct_size = sizeof(infiniCclPlugin_v2_t),
    .abi_version = INFINI_CCL_PLUGIN_ABI_VERSION_V2,
    .name = "nccl",
    .get_version = &nccl::Exported<&nccl::GetVersion>::Call,
    .get_error_string = &nccl::GetErrorString,
    .get_last_error = &nccl::GetLastError,
    .features = nccl::kFeatures,
    .supports = &nccl::Supports,
    .device_type = kDLCUDA,
    .device_vendor = "NVIDIA",
    .device_kind = "GPU",
    .visible_devices_env = "CUDA_VISIBLE_DEVICES",
    .get_device_count = &nccl::Exported<&nccl::GetDeviceCount>::Call,
    .set_device = &nccl::Exported<&nccl::SetDevice>::Call,
    .get_device = &nccl::Exported<&nccl::GetDevice>::Call,
    .mem_alloc = &nccl::Exported<&nccl::MemAlloc>::Call,
    .mem_free = &nccl::Exported<&nccl::MemFree>::Call,
    .memcpy_async = &nccl::Exported<&nccl::MemcpyAsync>::Call,
    .memset_async = &nccl::Exported<&nccl::MemsetAsync>::Call,
    .stream_create = &nccl::Exported<&nccl::StreamCreate>::Call,
    .stream_destroy = &nccl::Exported<&nccl::StreamDestroy>::Call,
    .stream_synchronize = &nccl::Exported<&nccl::StreamSynchronize>::Call,
    .stream_wait_event = &nccl::Exported<&nccl::StreamWaitEvent>::Call,
    .event_create = &nccl::Exported<&nccl::EventCreate>::Call,
    .event_destroy = &nccl::Exported<&nccl::EventDestroy>::Call,
    .event_record = &nccl::Exported<&nccl::EventRecord>::Call,
    .event_query = &nccl::Exported<&nccl::EventQuery>::Call,
    .event_synchronize = &nccl::Exported<&nccl::EventSynchronize>::Call,
    .event_elapsed_ms = &nccl::Exported<&nccl::EventElapsedMs>::Call,
    .unique_id_bytes = sizeof(ncclUniqueId),
    .get_unique_id = &nccl::Exported<&nccl::GetUniqueId>::Call,
    .comm_init_rank = &nccl::Exported<&nccl::CommInitRank>::Call,
    .comm_init_ranks = &nccl::Exported<&nccl::CommInitRanks>::Call,
    .comm_split = &nccl::Exported<&nccl::CommSplit>::Call,
    .comm_destroy = &nccl::Exported<&nccl::CommDestroy>::Call,
    .comm_abort = &nccl::Exported<&nccl::CommAbort>::Call,
    .comm_get_async_error = &nccl::Exported<&nccl::CommGetAsyncError>::Call,
    .comm_count = &nccl::Exported<&nccl::CommCount>::Call,
    .comm_user_rank = &nccl::Exported<&nccl::CommUserRank>::Call,
    .group_start = &nccl::Exported<&nccl::GroupStart>::Call,
    .group_end = &nccl::Exported<&nccl::GroupEnd>::Call,
    .all_reduce = &nccl::Exported<&nccl::AllReduce>::Call,
    .broadcast = &nccl::Exported<&nccl::Broadcast>::Call,
    .reduce = &nccl::Exported<&nccl::Reduce>::Call,
    .all_gather = &nccl::Exported<&nccl::AllGather>::Call,
    .reduce_scatter = &nccl::Exported<&nccl::ReduceScatter>::Call,
    .send = &nccl::Exported<&nccl::Send>::Call,
    .recv = &nccl::Exported<&nccl::Recv>::Call,
    .all_to_all = &nccl::Exported<&nccl::AllToAll>::Call,
    .barrier = &nccl::Exported<&nccl::Barrier>::Call,
    .all_to_all_v = &nccl::Exported<&nccl::AllToAllV>::Call,
    .all_gather_v = &nccl::Exported<&nccl::AllGatherV>::Call,
    .reduce_scatter_v = &nccl::Exported<&nccl::ReduceScatterV>::Call,
    .gather = &nccl::Exported<&nccl::Gather>::Call,
    .scatter = &nccl::Exported<&nccl::Scatter>::Call,
    .stream_begin_capture = &nccl::Exported<&nccl::StreamBeginCapture>::Call,
    .stream_end_capture = &nccl::Exported<&nccl::StreamEndCapture>::Call,
    .graph_launch = &nccl::Exported<&nccl::GraphLaunch>::Call,
    .graph_destroy = &nccl::Exported<&nccl::GraphDestroy>::Call,
    // NCCL reads its settings per communicator (the config, vendor options).
    .init = nullptr,
    .comm_shrink = nullptr,  // OfferRecoveryEntries
    .comm_revoke = nullptr,
    .comm_register = nullptr,  // OfferRecoveryEntries
    .comm_deregister = nullptr,
    .comm_window_register = nullptr,  // OfferRecoveryEntries
    .comm_window_deregister = nullptr,
    .get_link_bandwidth = &nccl::Exported<&nccl::GetLinkBandwidth>::Call,
    .host_register = &nccl::Exported<&nccl::HostRegister>::Call,
    .host_unregister = &nccl::Exported<&nccl::HostUnregister>::Call,
    .host_flag_create = &nccl::Exported<&nccl::HostFlagCreate>::Call,
    .host_flag_destroy = &nccl::Exported<&nccl::HostFlagDestroy>::Call,
    .stream_wait_host_flag = &nccl::Exported<&nccl::StreamWaitHostFlag>::Call,
    .stream_write_host_flag = &nccl::Exported<&nccl::StreamWriteHostFlag>::Call,
};
}  // extern "C"

namespace {

// Runs at dlopen, before the host reads the table: ncclCommShrink,
// ncclCommRevoke and ncclCommRegister/Deregister are offered only where both
// the header this plugin was built with and the library it runs with have
// them.
[[gnu::constructor]] void OfferRecoveryEntries() {
  nccl::g_shrink = nccl::CommShrinkIfAvailable();
  nccl::g_revoke = nccl::CommRevokeIfAvailable();
  if (nccl::g_shrink != nullptr) {
    infiniCclPlugin_v2.comm_shrink = &nccl::Exported<&nccl::Shrink>::Call;
  }
  if (nccl::g_revoke != nullptr) {
    infiniCclPlugin_v2.comm_revoke = &nccl::Exported<&nccl::Revoke>::Call;
  }
  nccl::g_registration = nccl::CommRegisterIfAvailable();
  if (nccl::g_registration.comm_register != nullptr) {
    infiniCclPlugin_v2.comm_register = &nccl::Exported<&nccl::Register>::Call;
    infiniCclPlugin_v2.comm_deregister = &nccl::Exported<&nccl::Deregister>::Call;
  }
  nccl::g_window_registration = nccl::CommWindowRegisterIfAvailable();
  if (nccl::g_window_registration.comm_window_register != nullptr) {
    infiniCclPlugin_v2.comm_window_register = &nccl::Exported<&nccl::WindowRegister>::Call;
    infiniCclPlugin_v2.comm_window_deregister = &nccl::Exported<&nccl::WindowDeregister>::Call;
  }
}

}  // namespace
