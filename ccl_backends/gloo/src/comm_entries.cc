// The communicator entries: unique ids, init (one rank, or several of this
// process on threads), split, shrink, revoke, destroy, abort, state and
// grouping.
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bootstrap.h"
#include "comm_call.h"
#include "entries.h"
#include "group.h"
#include "host_bootstrap_store.h"

namespace infini::gloo_backend {
namespace {

void RequireRankInGroup(int rank, int nranks) {
  RequireArgument(nranks >= 1, "nranks " + std::to_string(nranks) + " is not positive");
  RequireArgument(rank >= 0 && rank < nranks, "rank " + std::to_string(rank) +
                                                  " is out of range; expected 0.." +
                                                  std::to_string(nranks - 1));
}

// Checks what one process can see before any rank waits for its peers, so
// that a mistake fails at once rather than after the timeout.
GlooUniqueId ReadInitArguments(const void* unique_id, const infiniCclConfig_t* config,
                               const infiniCclBootstrap_t* bootstrap, CommOptions* options) {
  RequireArgument(unique_id != nullptr, "unique_id is NULL");
  const GlooUniqueId id = DecodeUniqueId(unique_id);
  *options = ReadConfig(config);
  if (bootstrap != nullptr) RequireUsableBootstrap(*bootstrap);
  return id;
}

// The single-rank path; throws.
Communicator* InitOneRank(int nranks, const GlooUniqueId& id, int rank, const CommOptions& options,
                          const infiniCclBootstrap_t* bootstrap) {
  auto store = OpenMeetingStore(id, bootstrap, options.timeout);
  return Communicator::Create(nranks, rank, std::move(store), GroupKeyPrefix(id), options);
}

std::string InitCallName(int rank, int nranks) {
  return "comm_init_rank(rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ")";
}

}  // namespace

infiniCclResult_t GetUniqueIdEntry(void* unique_id, const infiniCclBootstrap_t* bootstrap) {
  return Guarded("get_unique_id", [&] {
    RequireArgument(unique_id != nullptr, "unique_id is NULL");
    if (bootstrap != nullptr) RequireUsableBootstrap(*bootstrap);
    EncodeUniqueId(NewUniqueId(bootstrap), unique_id);
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommInitRankEntry(infiniCclComm_t* comm, int nranks, const void* unique_id,
                                    int rank, const infiniCclConfig_t* config,
                                    const infiniCclBootstrap_t* bootstrap) {
  const std::string call = InitCallName(rank, nranks);
  // Also makes gloo's event-loop thread, if created now, inherit the block.
  ScopedSigpipeBlock no_sigpipe;
  return Guarded(call.c_str(), [&] {
    RequireArgument(comm != nullptr, "comm is NULL");
    *comm = nullptr;
    RequireRankInGroup(rank, nranks);
    CommOptions options;
    const GlooUniqueId id = ReadInitArguments(unique_id, config, bootstrap, &options);
    *comm = ToHandle(InitOneRank(nranks, id, rank, options, bootstrap));
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommInitRanksEntry(infiniCclComm_t* comms, int ncomms, const int* devices,
                                     const int* ranks, int nranks, const void* unique_id,
                                     const infiniCclConfig_t* config,
                                     const infiniCclBootstrap_t* bootstrap) {
  ScopedSigpipeBlock no_sigpipe;
  return Guarded("comm_init_ranks", [&] {
    RequireArgument(comms != nullptr && devices != nullptr && ranks != nullptr,
                    "comms, devices or ranks is NULL");
    RequireArgument(ncomms >= 1 && ncomms <= nranks, "ncomms " + std::to_string(ncomms) +
                                                         " is out of range; expected 1.." +
                                                         std::to_string(nranks));
    std::set<int> distinct;
    for (int i = 0; i < ncomms; ++i) {
      comms[i] = nullptr;
      RequireRankInGroup(ranks[i], nranks);
      RequireArgument(distinct.insert(ranks[i]).second,
                      "rank " + std::to_string(ranks[i]) + " appears twice in ranks");
      RequireArgument(devices[i] >= 0, "devices[" + std::to_string(i) + "] " +
                                           std::to_string(devices[i]) + " is negative");
    }
    CommOptions options;
    const GlooUniqueId id = ReadInitArguments(unique_id, config, bootstrap, &options);

    // Every rank joins on its own thread (the ranks wait for each other);
    // the first failure in time is the one reported. None joins before every
    // thread exists: a thread that cannot be made (EAGAIN) is one error, and
    // the ones made never wait for it.
    std::mutex mutex;
    infiniCclResult_t first_result = infiniCclSuccess;
    std::string first_error;
    std::vector<std::thread> threads;
    std::condition_variable gate_changed;
    int gate = 0;  // 1: go, -1: a thread could not be made
    const auto open_gate = [&](int to) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        gate = to;
      }
      gate_changed.notify_all();
    };
    for (int i = 0; i < ncomms; ++i) {
      try {
        threads.emplace_back([&, i] {
          {
            std::unique_lock<std::mutex> lock(mutex);
            gate_changed.wait(lock, [&] { return gate != 0; });
            if (gate < 0) return;
          }
          ScopedSigpipeBlock thread_no_sigpipe;
          const std::string call = InitCallName(ranks[i], nranks);
          Communicator* made = nullptr;
          const infiniCclResult_t result = Guarded(call.c_str(), [&] {
            made = InitOneRank(nranks, id, ranks[i], options, bootstrap);
            return infiniCclSuccess;
          });
          comms[i] = ToHandle(made);
          if (result == infiniCclSuccess) return;
          std::lock_guard<std::mutex> lock(mutex);
          if (first_result == infiniCclSuccess) {
            first_result = result;
            first_error = LastError();
          }
        });
      } catch (const std::system_error& error) {
        open_gate(-1);
        for (std::thread& thread : threads) thread.join();
        throw PluginError(infiniCclSystemError, "cannot start thread " + std::to_string(i + 1) +
                                                    " of " + std::to_string(ncomms) +
                                                    " (one per rank): " + error.what());
      }
    }
    open_gate(1);
    for (std::thread& thread : threads) thread.join();
    if (first_result == infiniCclSuccess) return infiniCclSuccess;
    for (int i = 0; i < ncomms; ++i) {
      if (comms[i] != nullptr) {
        FromHandle(comms[i])->Abort();
        FromHandle(comms[i])->Release();
        comms[i] = nullptr;
      }
    }
    throw PluginError(first_result, first_error);
  });
}

infiniCclResult_t CommSplitEntry(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                                 const infiniCclConfig_t* config) {
  return CommCall("comm_split", comm, [&](Communicator& parent) {
    RequireArgument(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    if (InGroup()) {
      throw PluginError(infiniCclInvalidUsage,
                        "comm_split inside group_start/group_end is not supported by the gloo "
                        "backend; call it outside a group");
    }
    const CommOptions options = ReadConfig(config, parent.options());
    *newcomm = ToHandle(parent.Split(color, key, options));
  });
}

infiniCclResult_t CommShrinkEntry(infiniCclComm_t comm, const int32_t* excluded_ranks,
                                  int32_t excluded_count, const infiniCclConfig_t* config,
                                  int32_t flags, infiniCclComm_t* new_comm) {
  // Not through CommCall: a revoked communicator is what one shrinks.
  Communicator* parent = FromHandle(comm);
  if (parent == nullptr) return Fail(infiniCclInvalidArgument, "comm_shrink: comm is NULL");
  parent->Acquire();
  ScopedSigpipeBlock no_sigpipe;
  const infiniCclResult_t result = Guarded("comm_shrink", [&] {
    RequireArgument(new_comm != nullptr, "new_comm is NULL");
    *new_comm = nullptr;
    RequireArgument(excluded_count >= 0 && (excluded_count == 0 || excluded_ranks != nullptr),
                    "excluded_ranks is NULL or excluded_count " + std::to_string(excluded_count) +
                        " is negative");
    RequireArgument((flags & ~INFINI_CCL_SHRINK_ABORT) == 0,
                    "flags " + std::to_string(flags) +
                        ": expected INFINI_CCL_SHRINK_DEFAULT or INFINI_CCL_SHRINK_ABORT");
    if (parent->aborted()) {
      throw PluginError(infiniCclAborted, "the communicator was aborted (comm_abort)");
    }
    if (InGroup()) {
      throw PluginError(infiniCclInvalidUsage,
                        "comm_shrink inside group_start/group_end is not supported by the gloo "
                        "backend; call it outside a group");
    }
    const std::vector<int32_t> excluded(excluded_ranks, excluded_ranks + excluded_count);
    for (size_t i = 0; i < excluded.size(); ++i) {
      RequireArgument(excluded[i] >= 0 && excluded[i] < parent->world_size() &&
                          excluded[i] != parent->rank() &&
                          (i == 0 || excluded[i - 1] < excluded[i]),
                      "excluded_ranks[" + std::to_string(i) + "] " + std::to_string(excluded[i]) +
                          ": expected sorted, distinct ranks of the communicator other than "
                          "this one (" +
                          std::to_string(parent->rank()) + ")");
    }
    const CommOptions options = ReadConfig(config, parent->options());
    *new_comm = ToHandle(parent->Shrink(excluded, (flags & INFINI_CCL_SHRINK_ABORT) != 0, options));
    return infiniCclSuccess;
  });
  parent->Release();
  return result;
}

infiniCclResult_t CommRevokeEntry(infiniCclComm_t comm) {
  ScopedSigpipeBlock no_sigpipe;
  return Guarded("comm_revoke", [&] {
    RequireArgument(comm != nullptr, "comm is NULL");
    FromHandle(comm)->Revoke();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommDestroyEntry(infiniCclComm_t comm) {
  // Work is synchronous: nothing is outstanding once the calls returned.
  ScopedSigpipeBlock no_sigpipe;
  if (comm != nullptr) FromHandle(comm)->Release();
  return infiniCclSuccess;
}

infiniCclResult_t CommAbortEntry(infiniCclComm_t comm) {
  ScopedSigpipeBlock no_sigpipe;
  return Guarded("comm_abort", [&] {
    if (comm == nullptr) return infiniCclSuccess;
    Communicator* communicator = FromHandle(comm);
    communicator->Abort();
    communicator->Release();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommGetAsyncErrorEntry(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                         const char** message) {
  return Guarded("comm_get_async_error", [&] {
    RequireArgument(comm != nullptr && async_error != nullptr, "comm or async_error is NULL");
    *async_error = FromHandle(comm)->async_error();
    if (message != nullptr) *message = FromHandle(comm)->async_error_message();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommCountEntry(infiniCclComm_t comm, int* nranks) {
  return Guarded("comm_count", [&] {
    RequireArgument(comm != nullptr && nranks != nullptr, "comm or nranks is NULL");
    *nranks = FromHandle(comm)->world_size();
    return infiniCclSuccess;
  });
}

infiniCclResult_t CommUserRankEntry(infiniCclComm_t comm, int* rank) {
  return Guarded("comm_user_rank", [&] {
    RequireArgument(comm != nullptr && rank != nullptr, "comm or rank is NULL");
    *rank = FromHandle(comm)->rank();
    return infiniCclSuccess;
  });
}

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

}  // namespace infini::gloo_backend
