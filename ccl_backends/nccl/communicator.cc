#include "communicator.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "device_runtime.h"
#include "errors.h"

namespace infini::ccl::nccl {
namespace {

static_assert(sizeof(infiniCclUniqueId) == sizeof(ncclUniqueId),
              "infiniCclUniqueId must carry an ncclUniqueId unchanged");

// The caller's options, read only as far as its struct_size says they exist.
struct Options {
  bool blocking = true;
  std::string name;
  bool allow_device_sharing = false;
};

#define INFINI_CCL_HAS_FIELD(config, field) \
  ((config)->struct_size >= offsetof(infiniCclConfig_t, field) + sizeof((config)->field))

Options ReadOptions(const infiniCclConfig_t* config) {
  Options options;
  if (config == nullptr) return options;
  if (INFINI_CCL_HAS_FIELD(config, blocking)) options.blocking = config->blocking != 0;
  if (INFINI_CCL_HAS_FIELD(config, comm_name) && config->comm_name != nullptr) {
    options.name = config->comm_name;
  }
  if (INFINI_CCL_HAS_FIELD(config, allow_device_sharing)) {
    options.allow_device_sharing = config->allow_device_sharing != 0;
  }
  return options;
}

#undef INFINI_CCL_HAS_FIELD

// Allocates the communicator's barrier word on the current device.
infiniCclResult_t NewComm(std::string_view call, const Options& options,
                          std::unique_ptr<infiniCclComm>* comm) {
  auto created = std::make_unique<infiniCclComm>();
  created->name = options.name;
  if (infiniCclResult_t result = CheckCuda(cudaGetDevice(&created->device), call);
      result != infiniCclSuccess) {
    return result;
  }
  if (infiniCclResult_t result =
          CheckCuda(cudaMalloc(&created->barrier_word, sizeof(uint32_t)), call);
      result != infiniCclSuccess) {
    return result;
  }
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

ncclConfig_t ToNcclConfig(const Options& options, const infiniCclComm& comm) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = options.blocking ? 1 : 0;
  if (!comm.name.empty()) config.commName = comm.name.c_str();
  return config;
}

// NCCL refuses two ranks on one GPU with ncclInvalidUsage and a "Duplicate
// GPU detected" warning; say what that means for our users.
infiniCclResult_t ExplainInitFailure(ncclResult_t result, std::string_view call,
                                     const infiniCclComm& comm, const Options& options) {
  const infiniCclResult_t mapped = CheckNccl(result, call, comm.nccl);
  const std::string detail = LastError();
  if (result == ncclInvalidUsage && detail.find("Duplicate GPU") != std::string::npos) {
    return Fail(infiniCclInvalidUsage,
                std::string(call) + ": two ranks of this group use the same GPU (CUDA device " +
                    std::to_string(comm.device) + "); NCCL cannot run two ranks on one GPU" +
                    (options.allow_device_sharing ? ", even with allow_device_sharing set" : "") +
                    " — give each rank its own device, or use the gloo backend to test "
                    "communication logic (" +
                    detail + ")");
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

}  // namespace

infiniCclResult_t GetUniqueId(infiniCclUniqueId* unique_id) {
  if (unique_id == nullptr) {
    return Fail(infiniCclInvalidArgument, "get_unique_id: unique_id is NULL");
  }
  if (infiniCclResult_t result = RequireDevice("get_unique_id"); result != infiniCclSuccess) {
    return result;
  }
  ncclUniqueId id;
  if (infiniCclResult_t result = CheckNccl(ncclGetUniqueId(&id), "get_unique_id: ncclGetUniqueId");
      result != infiniCclSuccess) {
    return result;
  }
  std::memcpy(unique_id->internal, id.internal, sizeof(id.internal));
  return infiniCclSuccess;
}

infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, infiniCclUniqueId unique_id,
                               int rank, const infiniCclConfig_t* config) {
  constexpr std::string_view kCall = "comm_init_rank";
  if (comm == nullptr) return Fail(infiniCclInvalidArgument, "comm_init_rank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(infiniCclInvalidArgument, "comm_init_rank: rank " + std::to_string(rank) +
                                              " is not in [0, nranks=" + std::to_string(nranks) +
                                              ")");
  }
  if (infiniCclResult_t result = RequireDevice(kCall); result != infiniCclSuccess) return result;
  const Options options = ReadOptions(config);
  std::unique_ptr<infiniCclComm> created;
  if (infiniCclResult_t result = NewComm(kCall, options, &created); result != infiniCclSuccess) {
    return result;
  }
  created->rank = rank;
  created->nranks = nranks;
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.internal, sizeof(id.internal));
  ncclConfig_t nccl_config = ToNcclConfig(options, *created);
  const ncclResult_t result =
      ncclCommInitRankConfig(&created->nccl, nranks, id, rank, &nccl_config);
  if (result != ncclSuccess && result != ncclInProgress) {
    const infiniCclResult_t mapped = ExplainInitFailure(result, kCall, *created, options);
    if (created->nccl != nullptr) ncclCommAbort(created->nccl);
    created->nccl = nullptr;
    DeleteComm(created.release());
    return mapped;
  }
  *comm = created.release();
  // Non-blocking: the caller polls comm_get_async_error until it is not
  // infiniCclInProgress.
  return result == ncclInProgress
             ? Fail(infiniCclInProgress,
                    "comm_init_rank: non-blocking initialization in progress; poll "
                    "comm_get_async_error")
             : infiniCclSuccess;
}

infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                            const infiniCclConfig_t* config) {
  constexpr std::string_view kCall = "comm_split";
  if (newcomm == nullptr) return Fail(infiniCclInvalidArgument, "comm_split: newcomm is NULL");
  *newcomm = nullptr;
  if (infiniCclResult_t result = RequireComm(comm, kCall); result != infiniCclSuccess) {
    return result;
  }
  const Options options = ReadOptions(config);
  ScopedDevice on_device(comm->device);  // the new communicator shares the parent's device
  std::unique_ptr<infiniCclComm> created;
  if (infiniCclResult_t result = NewComm(kCall, options, &created); result != infiniCclSuccess) {
    return result;
  }
  ncclConfig_t nccl_config = ToNcclConfig(options, *created);
  const ncclResult_t result = ncclCommSplit(comm->nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                            &created->nccl, &nccl_config);
  if (result != ncclSuccess && result != ncclInProgress) {
    const infiniCclResult_t mapped = CheckNccl(result, "comm_split: ncclCommSplit", comm->nccl);
    if (created->nccl != nullptr) ncclCommAbort(created->nccl);
    created->nccl = nullptr;
    DeleteComm(created.release());
    return mapped;
  }
  if (created->nccl == nullptr) {
    DeleteComm(created.release());  // color < 0: this rank joins no new group
  } else {
    *newcomm = created.release();
  }
  return result == ncclInProgress
             ? Fail(infiniCclInProgress,
                    "comm_split: non-blocking split in progress; poll comm_get_async_error")
             : infiniCclSuccess;
}

infiniCclResult_t CommDestroy(infiniCclComm_t comm) {
  if (comm == nullptr) return infiniCclSuccess;
  infiniCclResult_t result = infiniCclSuccess;
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

infiniCclResult_t CommGetAsyncError(infiniCclComm_t comm, infiniCclResult_t* async_error) {
  constexpr std::string_view kCall = "comm_get_async_error";
  if (async_error == nullptr) {
    return Fail(infiniCclInvalidArgument, "comm_get_async_error: async_error is NULL");
  }
  if (infiniCclResult_t result = RequireComm(comm, kCall); result != infiniCclSuccess) {
    return result;
  }
  ncclResult_t state = ncclSuccess;
  if (infiniCclResult_t result =
          CheckNccl(ncclCommGetAsyncError(comm->nccl, &state), kCall, comm->nccl);
      result != infiniCclSuccess) {
    return result;
  }
  *async_error = FromNccl(state);
  if (state != ncclSuccess && state != ncclInProgress) {
    // Keep NCCL's explanation for the caller's next get_last_error().
    CheckNccl(state, "communicator failed asynchronously", comm->nccl);
  }
  return infiniCclSuccess;
}

namespace {

// Rank and size of a split communicator are known once NCCL has finished
// creating it; a non-blocking one may still be in progress.
infiniCclResult_t LearnShape(infiniCclComm_t comm, std::string_view call) {
  ncclResult_t state = ncclSuccess;
  if (infiniCclResult_t result = CheckNccl(ncclCommGetAsyncError(comm->nccl, &state), call);
      result != infiniCclSuccess) {
    return result;
  }
  if (state == ncclInProgress) {
    return Fail(infiniCclInProgress, std::string(call) +
                                         ": the communicator is still being created "
                                         "(non-blocking); poll comm_get_async_error");
  }
  int rank = -1;
  int nranks = -1;
  if (infiniCclResult_t result = CheckNccl(ncclCommUserRank(comm->nccl, &rank), call, comm->nccl);
      result != infiniCclSuccess) {
    return result;
  }
  if (infiniCclResult_t result = CheckNccl(ncclCommCount(comm->nccl, &nranks), call, comm->nccl);
      result != infiniCclSuccess) {
    return result;
  }
  comm->rank = rank;
  comm->nranks = nranks;
  return infiniCclSuccess;
}

}  // namespace

infiniCclResult_t CommCount(infiniCclComm_t comm, int* nranks) {
  if (nranks == nullptr) return Fail(infiniCclInvalidArgument, "comm_count: nranks is NULL");
  if (infiniCclResult_t result = RequireComm(comm, "comm_count"); result != infiniCclSuccess) {
    return result;
  }
  if (comm->nranks < 0) {
    if (infiniCclResult_t result = LearnShape(comm, "comm_count"); result != infiniCclSuccess) {
      return result;
    }
  }
  *nranks = comm->nranks;
  return infiniCclSuccess;
}

infiniCclResult_t CommUserRank(infiniCclComm_t comm, int* rank) {
  if (rank == nullptr) return Fail(infiniCclInvalidArgument, "comm_user_rank: rank is NULL");
  if (infiniCclResult_t result = RequireComm(comm, "comm_user_rank"); result != infiniCclSuccess) {
    return result;
  }
  if (comm->rank < 0) {
    if (infiniCclResult_t result = LearnShape(comm, "comm_user_rank"); result != infiniCclSuccess) {
      return result;
    }
  }
  *rank = comm->rank;
  return infiniCclSuccess;
}

}  // namespace infini::ccl::nccl
