// Communicators: NCCL communicators plus what the plugin keeps beside them.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "infini/ccl/plugin_abi.h"
#include "profiler.h"

// The ABI's opaque communicator type, defined by this plugin.
struct infiniCclComm {
  ncclComm_t nccl = nullptr;
  int device = 0;  // CUDA device the communicator lives on
  // Known at init (comm_init_rank's arguments) or learned from NCCL once a
  // split communicator is ready; -1 = not known yet.
  std::atomic<int> rank{-1};
  std::atomic<int> nranks{-1};
  // One element that barrier() all-reduces; owned here so barrier needs no
  // buffer from the caller.
  void* barrier_word = nullptr;
  std::string name;  // NCCL keeps a pointer to the name in its config
  // Revoked (comm_revoke, or comm_shrink's abort flag): ncclCommFinalize is
  // then invalid, so comm_destroy waits for quiescence and destroys.
  std::atomic<bool> revoked{false};
  // Last: ties the communicator to NCCL's profiler events while tracing.
  infini::ccl::nccl::ProfilerLink profiler_link{this};
};

namespace infini::ccl::nccl {

// NCCL carries what its ranks need in the id: the bootstrap is not used.
infiniCclResult_t GetUniqueId(void* unique_id, const infiniCclBootstrap_t* bootstrap);
infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, const void* unique_id, int rank,
                               const infiniCclConfig_t* config,
                               const infiniCclBootstrap_t* bootstrap);
// One group of ncclCommInitRankConfig calls, each on its device; restores the
// caller's current device.
infiniCclResult_t CommInitRanks(infiniCclComm_t* comms, int ncomms, const int* devices,
                                const int* ranks, int nranks, const void* unique_id,
                                const infiniCclConfig_t* config,
                                const infiniCclBootstrap_t* bootstrap);
infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                            const infiniCclConfig_t* config);
// ncclCommShrink (NCCL >= 2.27) and ncclCommRevoke (NCCL >= 2.28), resolved
// from the libnccl loaded at run time; NULL where the header this plugin
// was built with, or that library, lacks them (plugin.cc offers only the
// entries these return).
using CommShrinkEntry = infiniCclResult_t (*)(infiniCclComm_t, const int32_t*, int32_t,
                                              const infiniCclConfig_t*, int32_t, infiniCclComm_t*);
using CommRevokeEntry = infiniCclResult_t (*)(infiniCclComm_t);
CommShrinkEntry CommShrinkIfAvailable();
CommRevokeEntry CommRevokeIfAvailable();
infiniCclResult_t CommDestroy(infiniCclComm_t comm);
infiniCclResult_t CommAbort(infiniCclComm_t comm);
infiniCclResult_t CommGetAsyncError(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                    const char** message);
infiniCclResult_t CommCount(infiniCclComm_t comm, int* nranks);
infiniCclResult_t CommUserRank(infiniCclComm_t comm, int* rank);

}  // namespace infini::ccl::nccl
