#include "communicator.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "config.h"
#include "device_runtime.h"
#include "errors.h"
#include "nccl_symbol.h"

namespace infini::ccl::nccl {
namespace {

// Allocates the communicator's barrier word on the current device.
infiniCclResult_t NewComm(std::string_view call, const CommOptions& options,
                          std::unique_ptr<infiniCclComm>* comm) {
  auto created = std::make_unique<infiniCclComm>();
  created->name = options.name;
  CCLCHECK(CheckCuda(cudaGetDevice(&created->device), call));
  CCLCHECK(CheckCuda(cudaMalloc(&created->barrier_word, sizeof(uint32_t)), call));
  if (infiniCclResult_t result =
          CheckCuda(cudaMemset(created->barrier_word, 0, sizeof(uint32_t)), call);
      result != infiniCclSuccess) {
    cudaFree(created->barrier_word);
    return result;
  }
  *comm = std::move(created);
  return infiniCclSuccess;
}

void DeleteComm(infiniCclComm* comm) {
  if (comm->barrier_word != nullptr) {
    ScopedDevice on_device(comm->device);
    cudaFree(comm->barrier_word);
  }
  delete comm;
}

// A communicator being created: aborted and freed unless released to the
// caller.
struct AbortUnlessReleased {
  void operator()(infiniCclComm* comm) const {
    if (comm->nccl != nullptr) ncclCommAbort(comm->nccl);
    comm->nccl = nullptr;
    DeleteComm(comm);
  }
};
using PendingComm = std::unique_ptr<infiniCclComm, AbortUnlessReleased>;

std::string SameGpuMessage(std::string_view call, int device, const CommOptions& options) {
  return std::string(call) + ": two ranks of this group use the same GPU (CUDA device " +
         std::to_string(device) + "); NCCL cannot run two ranks on one GPU" +
         (options.allow_device_sharing ? ", even with allow_device_sharing set" : "") +
         " — give each rank its own device, or use the gloo backend to test communication logic";
}

// NCCL refuses two ranks on one GPU with ncclInvalidUsage and a "Duplicate
// GPU detected" warning; say what that means for our users.
infiniCclResult_t ExplainInitFailure(ncclResult_t result, std::string_view call, int device,
                                     const CommOptions& options) {
  const infiniCclResult_t mapped = CheckNccl(result, call);
  const std::string detail = LastError();
  if (result == ncclInvalidUsage && detail.find("Duplicate GPU") != std::string::npos) {
    return Fail(infiniCclInvalidUsage, SameGpuMessage(call, device, options) + " (" + detail + ")");
  }
  if (result == ncclInvalidUsage) {
    return Fail(mapped, detail +
                            " [if two ranks of the group share a GPU: NCCL needs one GPU per "
                            "rank]");
  }
  return mapped;
}

infiniCclResult_t RequireComm(infiniCclComm_t comm, std::string_view call) {
  if (comm != nullptr && comm->nccl != nullptr) return infiniCclSuccess;
  return Fail(infiniCclInvalidArgument, std::string(call) + ": communicator is NULL");
}

// Makes `device` current again when it goes out of scope.
struct RestoreDevice {
  int device;
  ~RestoreDevice() { cudaSetDevice(device); }
};

ncclUniqueId ToNcclId(const void* unique_id) {
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id, sizeof(id.internal));
  return id;
}

infiniCclResult_t InProgress(std::string_view call) {
  return Fail(
      infiniCclInProgress,
      std::string(call) + ": non-blocking initialization in progress; poll comm_get_async_error");
}

// The arguments of comm_init_ranks that NCCL would only reject deep inside
// its group, checked up front so that the caller hears which one is wrong.
infiniCclResult_t CheckInitRanksArguments(int ncomms, const int* devices, const int* ranks,
                                          int nranks, const CommOptions& options) {
  constexpr std::string_view kCall = "comm_init_ranks";
  int device_count = 0;
  GetDeviceCount(&device_count);
  std::vector<bool> device_used(static_cast<size_t>(device_count), false);
  std::set<int> ranks_seen;  // ncomms entries, not nranks: a group may be large
  for (int index = 0; index < ncomms; ++index) {
    const int device = devices[index];
    const int rank = ranks[index];
    const std::string which = "[" + std::to_string(index) + "]";
    if (device < 0 || device >= device_count) {
      return Fail(infiniCclInvalidArgument, std::string(kCall) + ": devices" + which + "=" +
                                                std::to_string(device) + " is not in [0, " +
                                                std::to_string(device_count) +
                                                ") (visible CUDA devices)");
    }
    if (rank < 0 || rank >= nranks) {
      return Fail(infiniCclInvalidArgument,
                  std::string(kCall) + ": ranks" + which + "=" + std::to_string(rank) +
                      " is not in [0, nranks=" + std::to_string(nranks) + ")");
    }
    if (!ranks_seen.insert(rank).second) {
      return Fail(infiniCclInvalidArgument, std::string(kCall) + ": ranks" + which + "=" +
                                                std::to_string(rank) +
                                                " appears twice; each rank is created once");
    }
    if (device_used[static_cast<size_t>(device)]) {
      return Fail(infiniCclInvalidUsage, SameGpuMessage(kCall, device, options));
    }
    device_used[static_cast<size_t>(device)] = true;
  }
  return infiniCclSuccess;
}

}  // namespace

infiniCclResult_t GetUniqueId(void* unique_id, const infiniCclBootstrap_t* /*bootstrap*/) {
  if (unique_id == nullptr) {
    return Fail(infiniCclInvalidArgument, "get_unique_id: unique_id is NULL");
  }
  CCLCHECK(RequireDevice("get_unique_id"));
  ncclUniqueId id;
  CCLCHECK(CheckNccl(ncclGetUniqueId(&id), "get_unique_id: ncclGetUniqueId"));
  std::memcpy(unique_id, id.internal, sizeof(id.internal));
  return infiniCclSuccess;
}

infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, const void* unique_id, int rank,
                               const infiniCclConfig_t* config,
                               const infiniCclBootstrap_t* /*bootstrap*/) {
  constexpr std::string_view kCall = "comm_init_rank";
  if (comm == nullptr) return Fail(infiniCclInvalidArgument, "comm_init_rank: comm is NULL");
  *comm = nullptr;
  if (unique_id == nullptr) {
    return Fail(infiniCclInvalidArgument, "comm_init_rank: unique_id is NULL");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(infiniCclInvalidArgument, "comm_init_rank: rank " + std::to_string(rank) +
                                              " is not in [0, nranks=" + std::to_string(nranks) +
                                              ")");
  }
  // The config first: a bad vendor option is the same mistake with or
  // without a device.
  CommOptions options;
  CCLCHECK(ReadOptions(config, kCall, &options));
  CCLCHECK(RequireDevice(kCall));
  std::unique_ptr<infiniCclComm> fresh;
  CCLCHECK(NewComm(kCall, options, &fresh));
  PendingComm created(fresh.release());
  created->rank = rank;
  created->nranks = nranks;
  ncclConfig_t nccl_config = ToNcclConfig(options, created->name);
  const ncclResult_t result =
      ncclCommInitRankConfig(&created->nccl, nranks, ToNcclId(unique_id), rank, &nccl_config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return ExplainInitFailure(result, kCall, created->device, options);
  }
  *comm = created.release();
  // Non-blocking: the caller polls comm_get_async_error until it is not
  // infiniCclInProgress.
  return result == ncclInProgress ? InProgress(kCall) : infiniCclSuccess;
}

infiniCclResult_t CommInitRanks(infiniCclComm_t* comms, int ncomms, const int* devices,
                                const int* ranks, int nranks, const void* unique_id,
                                const infiniCclConfig_t* config,
                                const infiniCclBootstrap_t* /*bootstrap*/) {
  constexpr std::string_view kCall = "comm_init_ranks";
  if (comms == nullptr) return Fail(infiniCclInvalidArgument, "comm_init_ranks: comms is NULL");
  if (ncomms < 1 || nranks < 1 || ncomms > nranks) {
    return Fail(infiniCclInvalidArgument, "comm_init_ranks: ncomms=" + std::to_string(ncomms) +
                                              " is not in [1, nranks=" + std::to_string(nranks) +
                                              "]");
  }
  for (int index = 0; index < ncomms; ++index) comms[index] = nullptr;
  if (devices == nullptr || ranks == nullptr || unique_id == nullptr) {
    return Fail(infiniCclInvalidArgument,
                "comm_init_ranks: devices, ranks and unique_id must not be NULL");
  }
  // The config first: a bad vendor option is the same mistake with or
  // without a device.
  CommOptions options;
  CCLCHECK(ReadOptions(config, kCall, &options));
  CCLCHECK(RequireDevice(kCall));
  CCLCHECK(CheckInitRanksArguments(ncomms, devices, ranks, nranks, options));
  int caller_device = 0;
  CCLCHECK(CheckCuda(cudaGetDevice(&caller_device), kCall));
  // Declared before the pending communicators, so restored after they are
  // freed on a failure.
  const RestoreDevice restore_caller_device{caller_device};

  // Everything that can fail outside NCCL happens before the group opens.
  std::vector<PendingComm> created;
  std::vector<ncclConfig_t> nccl_configs;
  created.reserve(static_cast<size_t>(ncomms));
  nccl_configs.reserve(static_cast<size_t>(ncomms));
  for (int index = 0; index < ncomms; ++index) {
    CCLCHECK(CheckCuda(cudaSetDevice(devices[index]), kCall));
    std::unique_ptr<infiniCclComm> fresh;
    CCLCHECK(NewComm(kCall, options, &fresh));
    fresh->rank = ranks[index];
    fresh->nranks = nranks;
    created.emplace_back(fresh.release());
    nccl_configs.push_back(ToNcclConfig(options, created.back()->name));
  }

  // One group: NCCL creates the ranks together (each init would otherwise
  // wait for the others), whether the rest of the group is in this process
  // or in others. NCCL takes each rank's device from the current device at
  // its call.
  const ncclUniqueId id = ToNcclId(unique_id);
  CCLCHECK(CheckNccl(ncclGroupStart(), "comm_init_ranks: ncclGroupStart"));
  ncclResult_t first_failure = ncclSuccess;
  int failed_device = devices[0];
  for (int index = 0; index < ncomms; ++index) {
    const cudaError_t set = cudaSetDevice(devices[index]);
    const ncclResult_t initialized =
        set != cudaSuccess ? ncclUnhandledCudaError
                           : ncclCommInitRankConfig(&created[index]->nccl, nranks, id, ranks[index],
                                                    &nccl_configs[index]);
    if (initialized != ncclSuccess && initialized != ncclInProgress &&
        first_failure == ncclSuccess) {
      first_failure = initialized;
      failed_device = devices[index];
    }
  }
  // Closed even after a failure, or the calling thread stays inside it.
  const ncclResult_t ended = ncclGroupEnd();
  if (first_failure == ncclSuccess && ended != ncclSuccess && ended != ncclInProgress) {
    first_failure = ended;
  }
  if (first_failure != ncclSuccess) {
    return ExplainInitFailure(first_failure, kCall, failed_device, options);  // aborts them all
  }
  for (int index = 0; index < ncomms; ++index) comms[index] = created[index].release();
  return ended == ncclInProgress ? InProgress(kCall) : infiniCclSuccess;
}

infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                            const infiniCclConfig_t* config) {
  constexpr std::string_view kCall = "comm_split";
  if (newcomm == nullptr) return Fail(infiniCclInvalidArgument, "comm_split: newcomm is NULL");
  *newcomm = nullptr;
  CCLCHECK(RequireComm(comm, kCall));
  CommOptions options;
  CCLCHECK(ReadOptions(config, kCall, &options));
  ScopedDevice on_device(comm->device);  // the new communicator shares the parent's device
  std::unique_ptr<infiniCclComm> fresh;
  CCLCHECK(NewComm(kCall, options, &fresh));
  PendingComm created(fresh.release());
  ncclConfig_t nccl_config = ToNcclConfig(options, created->name);
  const ncclResult_t result = ncclCommSplit(comm->nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                            &created->nccl, &nccl_config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return CheckNccl(result, "comm_split: ncclCommSplit", comm->nccl);
  }
  // color < 0: this rank joins no new group (created->nccl stays NULL and
  // the pending communicator is freed).
  if (created->nccl != nullptr) *newcomm = created.release();
  return result == ncclInProgress
             ? Fail(infiniCclInProgress,
                    "comm_split: non-blocking split in progress; poll comm_get_async_error")
             : infiniCclSuccess;
}

namespace {

// ncclCommGetAsyncError until the communicator is no longer in progress.
ncclResult_t WaitQuiescent(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return asked;
    if (state == ncclInProgress) std::this_thread::yield();
  }
  return state;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
using NcclShrink = ncclResult_t (*)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int);
NcclShrink g_nccl_shrink = nullptr;

infiniCclResult_t CommShrink(infiniCclComm_t comm, const int32_t* excluded_ranks,
                             int32_t excluded_count, const infiniCclConfig_t* config, int32_t flags,
                             infiniCclComm_t* new_comm) {
  constexpr std::string_view kCall = "comm_shrink";
  if (new_comm == nullptr) return Fail(infiniCclInvalidArgument, "comm_shrink: new_comm is NULL");
  *new_comm = nullptr;
  CCLCHECK(RequireComm(comm, kCall));
  if (excluded_count < 0 || (excluded_count > 0 && excluded_ranks == nullptr) ||
      (flags & ~INFINI_CCL_SHRINK_ABORT) != 0) {
    return Fail(infiniCclInvalidArgument,
                "comm_shrink: excluded_ranks NULL, excluded_count " +
                    std::to_string(excluded_count) + " or flags " + std::to_string(flags) +
                    ": expected a list of excluded_count ranks and 0 or INFINI_CCL_SHRINK_ABORT");
  }
  CommOptions options;
  CCLCHECK(ReadOptions(config, kCall, &options));
  ScopedDevice on_device(comm->device);  // the new communicator shares the parent's device
  std::unique_ptr<infiniCclComm> fresh;
  CCLCHECK(NewComm(kCall, options, &fresh));
  PendingComm created(fresh.release());
  ncclConfig_t nccl_config = ToNcclConfig(options, created->name);
  const bool abort_first = (flags & INFINI_CCL_SHRINK_ABORT) != 0;
  // After a revoke NCCL allows a shrink only once the parent is quiescent;
  // its state may then be an error, which is what a shrink recovers from.
  if (comm->revoked.load()) WaitQuiescent(comm->nccl);
  if (abort_first) comm->revoked = true;  // NCCL ends the parent's work
  ncclResult_t result = ncclSuccess;
  if (excluded_count == 0) {
    // NCCL refuses an empty list; a copy is a split of one color, in the
    // old order (equal keys keep it).
    result = ncclCommSplit(comm->nccl, 0, 0, &created->nccl, &nccl_config);
    if (result != ncclSuccess && result != ncclInProgress) {
      return CheckNccl(result, "comm_shrink: ncclCommSplit (no rank excluded)", comm->nccl);
    }
  } else {
    std::vector<int> excluded(excluded_ranks, excluded_ranks + excluded_count);
    result = g_nccl_shrink(comm->nccl, excluded.data(), excluded_count, &created->nccl,
                           &nccl_config, abort_first ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT);
    if (result != ncclSuccess && result != ncclInProgress) {
      return CheckNccl(result, "comm_shrink: ncclCommShrink", comm->nccl);
    }
  }
  *new_comm = created.release();
  return result == ncclInProgress
             ? Fail(infiniCclInProgress,
                    "comm_shrink: non-blocking shrink in progress; poll comm_get_async_error")
             : infiniCclSuccess;
}
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
using NcclRevoke = ncclResult_t (*)(ncclComm_t, int);
NcclRevoke g_nccl_revoke = nullptr;

infiniCclResult_t CommRevoke(infiniCclComm_t comm) {
  CCLCHECK(RequireComm(comm, "comm_revoke"));
  comm->revoked = true;
  const ncclResult_t result = g_nccl_revoke(comm->nccl, NCCL_REVOKE_DEFAULT);
  if (result == ncclInProgress) {
    return Fail(infiniCclInProgress,
                "comm_revoke: outstanding work still stopping; poll comm_get_async_error");
  }
  return CheckNccl(result, "comm_revoke: ncclCommRevoke", comm->nccl);
}
#endif

}  // namespace

CommShrinkEntry CommShrinkIfAvailable() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  g_nccl_shrink =
      reinterpret_cast<NcclShrink>(NcclSymbol("ncclCommShrink", NCCL_VERSION(2, 27, 0)));
  if (g_nccl_shrink != nullptr) return &CommShrink;
#endif
  return nullptr;
}

CommRevokeEntry CommRevokeIfAvailable() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  g_nccl_revoke =
      reinterpret_cast<NcclRevoke>(NcclSymbol("ncclCommRevoke", NCCL_VERSION(2, 28, 0)));
  if (g_nccl_revoke != nullptr) return &CommRevoke;
#endif
  return nullptr;
}

infiniCclResult_t CommDestroy(infiniCclComm_t comm) {
  if (comm == nullptr) return infiniCclSuccess;
  infiniCclResult_t result = infiniCclSuccess;
  if (comm->nccl != nullptr && comm->revoked.load()) {
    // Finalize is invalid after a revoke: wait until the work has stopped,
    // then free. A revoked communicator's error state is expected.
    const ncclResult_t state = WaitQuiescent(comm->nccl);
    result =
        CheckNccl(state == ncclSuccess ? ncclCommDestroy(comm->nccl) : ncclCommAbort(comm->nccl),
                  "comm_destroy (revoked): ncclCommDestroy");
    DeleteComm(comm);
    return result;
  }
  if (comm->nccl != nullptr) {
    // Finalize flushes outstanding work; for a non-blocking communicator it
    // returns early, and the wait below is what "wait for outstanding work"
    // means.
    ncclResult_t finalized = ncclCommFinalize(comm->nccl);
    while (finalized == ncclInProgress) {
      std::this_thread::yield();
      ncclResult_t state = ncclSuccess;
      finalized = ncclCommGetAsyncError(comm->nccl, &state);
      if (finalized == ncclSuccess) finalized = state;
    }
    result = CheckNccl(finalized, "comm_destroy: ncclCommFinalize", comm->nccl);
    const ncclResult_t destroyed =
        finalized == ncclSuccess ? ncclCommDestroy(comm->nccl) : ncclCommAbort(comm->nccl);
    if (result == infiniCclSuccess) {
      result = CheckNccl(destroyed, "comm_destroy: ncclCommDestroy");
    }
  }
  DeleteComm(comm);
  return result;
}

infiniCclResult_t CommAbort(infiniCclComm_t comm) {
  if (comm == nullptr) return infiniCclSuccess;
  infiniCclResult_t result = infiniCclSuccess;
  if (comm->nccl != nullptr) {
    result = CheckNccl(ncclCommAbort(comm->nccl), "comm_abort: ncclCommAbort");
  }
  DeleteComm(comm);
  return result;
}

infiniCclResult_t CommGetAsyncError(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                    const char** message) {
  constexpr std::string_view kCall = "comm_get_async_error";
  if (message != nullptr) *message = "";
  if (async_error == nullptr) {
    return Fail(infiniCclInvalidArgument, "comm_get_async_error: async_error is NULL");
  }
  CCLCHECK(RequireComm(comm, kCall));
  ncclResult_t state = ncclSuccess;
  CCLCHECK(CheckNccl(ncclCommGetAsyncError(comm->nccl, &state), kCall, comm->nccl));
  *async_error = FromNccl(state);
  if (state != ncclSuccess && state != ncclInProgress) {
    // NCCL's text, also kept for the caller's next get_last_error().
    CheckNccl(state, "communicator failed asynchronously", comm->nccl);
  }
  if (message == nullptr) return infiniCclSuccess;  // a watchdog's poll: no text to build
  // Per thread, not per communicator: a watchdog and the rank's own thread
  // may ask at once. Valid until this thread's next call, which is at least
  // as long as the ABI promises.
  thread_local std::string text;
  text.clear();
  if (state == ncclInProgress) {
    text = "a non-blocking operation of this communicator is still in progress";
  } else if (state != ncclSuccess) {
    text = LastError();
    for (char& character : text) {
      if (character == '\n' || character == '\r') character = ' ';  // one line
    }
  }
  *message = text.c_str();
  return infiniCclSuccess;
}

namespace {

// Rank and size of a split communicator are known once NCCL has finished
// creating it; a non-blocking one may still be in progress.
infiniCclResult_t LearnShape(infiniCclComm_t comm, std::string_view call) {
  ncclResult_t state = ncclSuccess;
  CCLCHECK(CheckNccl(ncclCommGetAsyncError(comm->nccl, &state), call));
  if (state == ncclInProgress) {
    return Fail(infiniCclInProgress, std::string(call) +
                                         ": the communicator is still being created "
                                         "(non-blocking); poll comm_get_async_error");
  }
  int rank = -1;
  int nranks = -1;
  CCLCHECK(CheckNccl(ncclCommUserRank(comm->nccl, &rank), call, comm->nccl));
  CCLCHECK(CheckNccl(ncclCommCount(comm->nccl, &nranks), call, comm->nccl));
  comm->rank = rank;
  comm->nranks = nranks;
  return infiniCclSuccess;
}

}  // namespace

infiniCclResult_t CommCount(infiniCclComm_t comm, int* nranks) {
  if (nranks == nullptr) return Fail(infiniCclInvalidArgument, "comm_count: nranks is NULL");
  CCLCHECK(RequireComm(comm, "comm_count"));
  if (comm->nranks < 0) {
    CCLCHECK(LearnShape(comm, "comm_count"));
  }
  *nranks = comm->nranks;
  return infiniCclSuccess;
}

infiniCclResult_t CommUserRank(infiniCclComm_t comm, int* rank) {
  if (rank == nullptr) return Fail(infiniCclInvalidArgument, "comm_user_rank: rank is NULL");
  CCLCHECK(RequireComm(comm, "comm_user_rank"));
  if (comm->rank < 0) {
    CCLCHECK(LearnShape(comm, "comm_user_rank"));
  }
  *rank = comm->rank;
  return infiniCclSuccess;
}

}  // namespace infini::ccl::nccl
