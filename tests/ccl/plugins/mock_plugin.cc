// A host-memory plugin for one rank, built in several deliberately broken
// variants (compile definitions) to test the loader, and intact to test that
// the C++ API refuses bad arguments before calling into a plugin.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "infini/ccl/plugin_abi.h"

#ifndef MOCK_ABI_VERSION
#define MOCK_ABI_VERSION INFINI_CCL_PLUGIN_ABI_VERSION
#endif
#ifndef MOCK_STRUCT_SIZE
#define MOCK_STRUCT_SIZE sizeof(infiniCclPlugin_v1_t)
#endif

namespace {

int g_calls = 0;  // collective calls that reached the plugin
thread_local const char* g_last_error = "";

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
infiniCclResult_t UniqueId(infiniCclUniqueId* id) {
  std::memset(id->internal, 7, sizeof(id->internal));
  return infiniCclSuccess;
}
infiniCclResult_t InitRank(infiniCclComm_t* comm, int nranks, infiniCclUniqueId, int rank,
                           const infiniCclConfig_t* config) {
  if (nranks != 1) return Fail("mock plugin supports one rank only");
  *comm = reinterpret_cast<infiniCclComm_t>(new MockComm{rank});
  // Like a non-blocking NCCL communicator: the handle exists, setup goes on.
  return config != nullptr && config->blocking == 0 ? infiniCclInProgress : infiniCclSuccess;
}
infiniCclResult_t Split(infiniCclComm_t, int, int, infiniCclComm_t* newcomm,
                        const infiniCclConfig_t*) {
  *newcomm = nullptr;
  return infiniCclSuccess;
}
infiniCclResult_t Destroy(infiniCclComm_t comm) {
  delete reinterpret_cast<MockComm*>(comm);
  return infiniCclSuccess;
}
infiniCclResult_t AsyncError(infiniCclComm_t, infiniCclResult_t* error) {
  *error = infiniCclSuccess;
  return infiniCclSuccess;
}
infiniCclResult_t Count(infiniCclComm_t, int* nranks) {
  *nranks = 1;
  return infiniCclSuccess;
}
infiniCclResult_t UserRank(infiniCclComm_t comm, int* rank) {
  *rank = reinterpret_cast<MockComm*>(comm)->rank;
  return infiniCclSuccess;
}
infiniCclResult_t Group() { return infiniCclSuccess; }
infiniCclResult_t AllReduce(const void*, void*, size_t, DLDataType, infiniCclRedOp_t,
                            infiniCclComm_t, infiniCclStream_t) {
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

}  // namespace

extern "C" {

// Lets a test see how many collective calls reached the plugin.
__attribute__((visibility("default"))) int mock_plugin_collective_calls() { return g_calls; }

}  // extern "C"

// The no-symbol variant exports its table under a misspelt name.
#ifdef MOCK_NO_SYMBOL
#define MOCK_TABLE_NAME infiniCclPlugin_V1
#else
#define MOCK_TABLE_NAME infiniCclPlugin_v1
#endif
INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v1_t MOCK_TABLE_NAME = {MOCK_STRUCT_SIZE,
                                                                       MOCK_ABI_VERSION,
                                                                       "mock",
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
