// Our own declarations of the part of NCCL's profiler plugin interface,
// version 5, that profiler.cc implements (docs/tracing.md, "Events a plugin
// reports"). NCCL installs no profiler header: these mirror the layout of
// NVIDIA/nccl v2.28.9-1, ext-profiler/example/nccl/profiler_v5.h and
// profiler.h (NCCL 2.28 looks for ncclProfiler_v5 first; 2.29 tries v6, then
// v5). Only what we read is named; the union keeps its place and alignment
// (it starts after `rank`, 8-aligned), so the members we read sit where NCCL
// writes them. Plain C types: no NCCL header is needed, so the non-GPU test
// (tests/nccl/nccl_profiler_test.cc) drives the plugin with these too.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace infini::ccl::nccl::profiler_v5 {

// ncclResult_t: an int-sized enum; the profiler only ever returns success.
using Result = int;
inline constexpr Result kSuccess = 0;

// Event types (profiler.h's enum), the ones we ask for.
inline constexpr uint64_t kProfileColl = 1u << 1;  // a collective's enqueue, host side
inline constexpr uint64_t kProfileP2p = 1u << 2;   // a send's or a recv's

struct CollDescription {
  uint64_t seqNumber;  // NCCL's number of this function on the communicator
  const char* func;    // "AllReduce", "AllGather" ... (static strings)
  const void* sendBuff;
  void* recvBuff;
  size_t count;  // elements of `datatype` (all_gather, broadcast: bytes, ncclInt8)
  int root;
  const char* datatype;  // "ncclFloat32" ...
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;   // "RING", "TREE", "NVLS", "COLLNET_DIRECT", "PAT" ...
  const char* proto;  // "LL", "LL128", "SIMPLE"
  void* parentGroup;
};

struct P2pDescription {
  const char* func;  // "Send", "Recv"
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
};

// ncclProfilerEventDescr_v5_t.
struct EventDescription {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    CollDescription coll;
    P2pDescription p2p;
  };
};

// void (*)(ncclDebugLogLevel, unsigned long flags, const char* file, int
// line, const char* fmt, ...); the level is an int-sized enum.
using DebugLogger = void (*)(int level, unsigned long flags, const char* file, int line,
                             const char* format, ...);

// ncclProfiler_v5_t.
struct Profiler {
  const char* name;
  Result (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                 int nNodes, int nranks, int rank, DebugLogger logfn);
  Result (*startEvent)(void* context, void** eHandle, EventDescription* eDescr);
  Result (*stopEvent)(void* eHandle);
  // eState: ncclProfilerEventState_v5_t (an int-sized enum); eStateArgs:
  // ncclProfilerEventStateArgs_v5_t*, which we never read.
  Result (*recordEventState)(void* eHandle, int eState, void* eStateArgs);
  Result (*finalize)(void* context);
};

inline constexpr const char* kSymbol = "ncclProfiler_v5";
// NCCL's variable naming the profiler library (a name or a path).
inline constexpr const char* kPluginVariable = "NCCL_PROFILER_PLUGIN";
// NCCL copies the variable's value into a buffer of 255 characters.
inline constexpr size_t kLongestPath = 254;

}  // namespace infini::ccl::nccl::profiler_v5
