// The exported plugin struct (infiniCclPlugin_v1) and the ABI entry points:
// argument checks, grouping, reference counting of communicators, and the
// translation of every exception into a result code.
#include <gloo/config.h>

#include <functional>
#include <string>

#include "bootstrap.h"
#include "collectives.h"
#include "communicator.h"
#include "device_runtime.h"
#include "errors.h"
#include "group.h"
#include "infini/ccl/plugin_abi.h"
#include "reduce_kernels.h"
#include "sigpipe.h"
#include "unique_id.h"

namespace infini::gloo_backend {
namespace {

#define INFINI_GLOO_STRINGIFY2(x) #x
#define INFINI_GLOO_STRINGIFY(x) INFINI_GLOO_STRINGIFY2(x)
constexpr const char* kVersion =
    "gloo " INFINI_GLOO_STRINGIFY(GLOO_VERSION_MAJOR) "." INFINI_GLOO_STRINGIFY(
        GLOO_VERSION_MINOR) "." INFINI_GLOO_STRINGIFY(GLOO_VERSION_PATCH) " (TCP transport)";

// Failures that leave a communicator unusable, kept as its async error.
bool BreaksCommunicator(infiniCclResult_t result) {
  return result == infiniCclRemoteError || result == infiniCclTimeout ||
         result == infiniCclSystemError || result == infiniCclInternalError ||
         result == infiniCclAborted;
}

// Runs `body(comm)` holding a reference to the communicator, so that an
// abort from another thread cannot free it mid-call. A failure on an aborted
// communicator is reported as infiniCclAborted.
template <class Body>
infiniCclResult_t CommCall(const char* call, infiniCclComm_t handle, Body&& body) noexcept {
  Communicator* comm = FromHandle(handle);
  if (comm == nullptr) return Fail(infiniCclInvalidArgument, std::string(call) + ": comm is NULL");
  comm->Acquire();
  ScopedSigpipeBlock no_sigpipe;
  infiniCclResult_t result = Guarded(call, [&] {
    comm->ThrowIfAborted();
    body(*comm);
    return infiniCclSuccess;
  });
  if (result != infiniCclSuccess && result != infiniCclAborted && comm->aborted()) {
    result = Fail(infiniCclAborted,
                  std::string(call) + ": the communicator was aborted (" + LastError() + ")");
  }
  if (BreaksCommunicator(result)) comm->RecordAsyncError(result);
  comm->Release();
  return result;
}

// Collectives are queued inside a group and run now outside one.
void RunOrDefer(Communicator& comm, std::function<void(Communicator&)> call) {
  if (InGroup()) {
    DeferCollective(comm, std::move(call));
  } else {
    call(comm);
  }
}

void RequireBuffer(const void* buffer, size_t count, const char* name) {
  RequireArgument(count == 0 || buffer != nullptr,
                  std::string(name) + " is NULL with count " + std::to_string(count));
}

void RequireRank(int rank, const Communicator& comm, const char* what) {
  RequireArgument(rank >= 0 && rank < comm.world_size(),
                  std::string(what) + " " + std::to_string(rank) +
                      " is out of range; expected 0.." + std::to_string(comm.world_size() - 1));
}

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

// ---- Communicators ----------------------------------------------------------

infiniCclResult_t GetUniqueId(infiniCclUniqueId* unique_id) {
  return Guarded("get_unique_id", [&] {
    RequireArgument(unique_id != nullptr, "unique_id is NULL");
    *unique_id = EncodeUniqueId(NewBootstrapAddress());
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, infiniCclUniqueId unique_id,
                               int rank, const infiniCclConfig_t* config) {
  const std::string call =
      "comm_init_rank(rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ")";
  // Also makes gloo's event-loop thread, if created now, inherit the block.
  ScopedSigpipeBlock no_sigpipe;
  return Guarded(call.c_str(), [&] {
    RequireArgument(comm != nullptr, "comm is NULL");
    *comm = nullptr;
    RequireArgument(nranks >= 1, "nranks " + std::to_string(nranks) + " is not positive");
    RequireArgument(rank >= 0 && rank < nranks, "rank " + std::to_string(rank) +
                                                    " is out of range; expected 0.." +
                                                    std::to_string(nranks - 1));
    const BootstrapAddress address = DecodeUniqueId(unique_id);
    const CommOptions options = ReadConfig(config);
    auto store = ConnectToBootstrapStore(address, options.timeout);
    *comm = ToHandle(Communicator::Create(nranks, rank, std::move(store),
                                          "infini_ccl_gloo/" + NonceHex(address.nonce), options));
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                            const infiniCclConfig_t* config) {
  return CommCall("comm_split", comm, [&](Communicator& parent) {
    RequireArgument(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    if (InGroup()) {
      throw PluginError(infiniCclInvalidUsage,
                        "comm_split inside group_start/group_end is not supported by the gloo "
                        "backend; call it outside a group");
    }
    const CommOptions options = ReadConfig(config, {parent.timeout(), parent.name()});
    *newcomm = ToHandle(parent.Split(color, key, options));
  });
}

infiniCclResult_t CommDestroy(infiniCclComm_t comm) {
  // Work is synchronous: nothing is outstanding once the calls returned.
  ScopedSigpipeBlock no_sigpipe;
  if (comm != nullptr) FromHandle(comm)->Release();
  return infiniCclSuccess;
}

infiniCclResult_t CommAbort(infiniCclComm_t comm) {
  ScopedSigpipeBlock no_sigpipe;
  return Guarded("comm_abort", [&] {
    if (comm == nullptr) return infiniCclSuccess;
    Communicator* communicator = FromHandle(comm);
    communicator->Abort();
    communicator->Release();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommGetAsyncError(infiniCclComm_t comm, infiniCclResult_t* async_error) {
  return Guarded("comm_get_async_error", [&] {
    RequireArgument(comm != nullptr && async_error != nullptr, "comm or async_error is NULL");
    *async_error = FromHandle(comm)->async_error();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommCount(infiniCclComm_t comm, int* nranks) {
  return Guarded("comm_count", [&] {
    RequireArgument(comm != nullptr && nranks != nullptr, "comm or nranks is NULL");
    *nranks = FromHandle(comm)->world_size();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommUserRank(infiniCclComm_t comm, int* rank) {
  return Guarded("comm_user_rank", [&] {
    RequireArgument(comm != nullptr && rank != nullptr, "comm or rank is NULL");
    *rank = FromHandle(comm)->rank();
    return infiniCclSuccess;
  });
}

// ---- Grouping ---------------------------------------------------------------

infiniCclResult_t GroupStartEntry() {
  return Guarded("group_start", [] {
    GroupStart();
    return infiniCclSuccess;
  });
}

infiniCclResult_t GroupEndEntry() {
  ScopedSigpipeBlock no_sigpipe;
  return Guarded("group_end", [] {
    GroupEnd();
    return infiniCclSuccess;
  });
}

// ---- Collectives ------------------------------------------------------------

infiniCclResult_t AllReduceEntry(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("all_reduce", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(
        c, [=](Communicator& target) { AllReduce(target, sendbuff, recvbuff, count, dtype, op); });
  });
}

infiniCclResult_t BroadcastEntry(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType dtype, int root, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("broadcast", comm, [&](Communicator& c) {
    ElementBytes(dtype);
    RequireRank(root, c, "root");
    if (c.rank() == root) RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      Broadcast(target, sendbuff, recvbuff, count, dtype, root);
    });
  });
}

infiniCclResult_t ReduceEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                              infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                              infiniCclStream_t /*stream*/) {
  return CommCall("reduce", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    RequireRank(root, c, "root");
    RequireBuffer(sendbuff, count, "sendbuff");
    if (c.rank() == root) RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      Reduce(target, sendbuff, recvbuff, count, dtype, op, root);
    });
  });
}

infiniCclResult_t AllGatherEntry(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 DLDataType dtype, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("all_gather", comm, [&](Communicator& c) {
    ElementBytes(dtype);
    RequireBuffer(sendbuff, sendcount, "sendbuff");
    RequireBuffer(recvbuff, sendcount, "recvbuff");
    RunOrDefer(
        c, [=](Communicator& target) { AllGather(target, sendbuff, recvbuff, sendcount, dtype); });
  });
}

infiniCclResult_t ReduceScatterEntry(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                     infiniCclStream_t /*stream*/) {
  return CommCall("reduce_scatter", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    RequireBuffer(sendbuff, recvcount, "sendbuff");
    RequireBuffer(recvbuff, recvcount, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      ReduceScatter(target, sendbuff, recvbuff, recvcount, dtype, op);
    });
  });
}

infiniCclResult_t SendEntry(const void* sendbuff, size_t count, DLDataType dtype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("send", comm, [&](Communicator& c) {
    const size_t element_bytes = ElementBytes(dtype);
    RequireRank(peer, c, "peer");
    RequireBuffer(sendbuff, count, "sendbuff");
    Send(c, sendbuff, count * element_bytes, peer);
  });
}

infiniCclResult_t RecvEntry(void* recvbuff, size_t count, DLDataType dtype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("recv", comm, [&](Communicator& c) {
    const size_t element_bytes = ElementBytes(dtype);
    RequireRank(peer, c, "peer");
    RequireBuffer(recvbuff, count, "recvbuff");
    Recv(c, recvbuff, count * element_bytes, peer);
  });
}

infiniCclResult_t AllToAllEntry(const void* sendbuff, void* recvbuff, size_t count,
                                DLDataType dtype, infiniCclComm_t comm,
                                infiniCclStream_t /*stream*/) {
  return CommCall("all_to_all", comm, [&](Communicator& c) {
    ElementBytes(dtype);
    RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(c,
               [=](Communicator& target) { AllToAll(target, sendbuff, recvbuff, count, dtype); });
  });
}

infiniCclResult_t BarrierEntry(infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("barrier", comm, [&](Communicator& c) {
    RunOrDefer(c, [](Communicator& target) { Barrier(target); });
  });
}

}  // namespace
}  // namespace infini::gloo_backend

namespace gb = infini::gloo_backend;

extern "C" {
__attribute__((visibility("default"))) extern const infiniCclPlugin_v1_t infiniCclPlugin_v1;

const infiniCclPlugin_v1_t infiniCclPlugin_v1 = {
    .struct_size = sizeof(infiniCclPlugin_v1_t),
    .abi_version = INFINI_CCL_PLUGIN_ABI_VERSION,
    .name = "gloo",
    .get_version = gb::GetVersion,
    .get_error_string = gb::GetErrorString,
    .get_last_error = gb::GetLastError,
    .device_type = kDLCPU,
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
    .get_unique_id = gb::GetUniqueId,
    .comm_init_rank = gb::CommInitRank,
    .comm_split = gb::CommSplit,
    .comm_destroy = gb::CommDestroy,
    .comm_abort = gb::CommAbort,
    .comm_get_async_error = gb::CommGetAsyncError,
    .comm_count = gb::CommCount,
    .comm_user_rank = gb::CommUserRank,
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
    // Work is synchronous on the host: there is nothing to capture.
    .stream_begin_capture = nullptr,
    .stream_end_capture = nullptr,
    .graph_launch = nullptr,
    .graph_destroy = nullptr,
};
}
