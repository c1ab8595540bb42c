#include "membership.h"

#include <algorithm>
#include <string>
#include <utility>

#include "infini/ccl/plugin_table.h"

namespace infini::ccl::internal {
namespace {

// Frees a communicator the host refuses: abort does not wait for peers
// that may be in another world.
void Discard(const Backend& backend, infiniCclComm_t handle) {
  if (handle == nullptr) return;
  const infiniCclPlugin_t& plugin = PluginTable(backend);
  (plugin.comm_abort != nullptr ? plugin.comm_abort : plugin.comm_destroy)(handle);
}

struct Membership {
  int rank = -1;
  int count = -1;
  // Not known yet: a non-blocking init still in progress cannot answer.
  bool pending = false;
};

Membership Ask(const Backend& backend, infiniCclComm_t handle, std::string_view call) {
  const infiniCclPlugin_t& plugin = PluginTable(backend);
  Membership membership;
  const infiniCclResult_t rank = plugin.comm_user_rank(handle, &membership.rank);
  const infiniCclResult_t count = plugin.comm_count(handle, &membership.count);
  if (rank == infiniCclInProgress || count == infiniCclInProgress) {
    membership.pending = true;
    return membership;
  }
  backend.Check(rank, std::string(call) + " → comm_user_rank");
  backend.Check(count, std::string(call) + " → comm_count");
  return membership;
}

[[noreturn]] void Refuse(const Backend& backend, std::string_view call, const std::string& what) {
  throw Error(infiniCclInternalError, "backend plugin '" + backend.info().name + "' (" +
                                          backend.info().library_path + ") " + std::string(call) +
                                          " " + what + "; refusing that communicator");
}

}  // namespace

void CheckMembership(const Backend& backend, std::span<const infiniCclComm_t> handles,
                     std::span<const int> ranks, int world_size, std::string_view call) {
  for (size_t i = 0; i < handles.size(); ++i) {
    Membership found;
    try {
      found = Ask(backend, handles[i], call);
    } catch (...) {
      for (infiniCclComm_t handle : handles) Discard(backend, handle);
      throw;
    }
    if (found.pending || (found.rank == ranks[i] && found.count == world_size)) continue;
    for (infiniCclComm_t handle : handles) Discard(backend, handle);
    Refuse(backend, call,
           "made a communicator of " + std::to_string(found.count) + " ranks with this rank as " +
               std::to_string(found.rank) + ", asked for " + std::to_string(world_size) +
               " ranks with this rank as " + std::to_string(ranks[i]));
  }
}

std::pair<int, int> CheckSplitMembership(const Backend& backend, infiniCclComm_t handle,
                                         int parent_world_size) {
  Membership found;
  try {
    found = Ask(backend, handle, "comm_split");
  } catch (...) {
    Discard(backend, handle);
    throw;
  }
  if (found.pending) return {found.rank, found.count};  // as the plugin has it so far
  if (found.count >= 1 && found.count <= parent_world_size && found.rank >= 0 &&
      found.rank < found.count) {
    return {found.rank, found.count};
  }
  Discard(backend, handle);
  Refuse(backend, "comm_split",
         "made a child communicator of " + std::to_string(found.count) +
             " ranks with this rank as " + std::to_string(found.rank) +
             ", expected at most the parent's " + std::to_string(parent_world_size) +
             " ranks and a rank below the child's size");
}

std::vector<int32_t> NormalizedExclusion(std::span<const int> excluded_ranks, int rank,
                                         int world_size) {
  std::vector<int32_t> excluded(excluded_ranks.begin(), excluded_ranks.end());
  for (int32_t excluded_rank : excluded) {
    if (excluded_rank < 0 || excluded_rank >= world_size) {
      throw Error(infiniCclInvalidArgument,
                  "Shrink: excluded rank " + std::to_string(excluded_rank) +
                      " is not a rank of this communicator: expected 0.." +
                      std::to_string(world_size - 1));
    }
  }
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  if (static_cast<int>(excluded.size()) == world_size) {
    throw Error(infiniCclInvalidArgument,
                "Shrink: the excluded ranks are all " + std::to_string(world_size) +
                    " ranks of this communicator: expected at least one survivor");
  }
  if (std::binary_search(excluded.begin(), excluded.end(), rank)) {
    throw Error(
        infiniCclInvalidArgument,
        "Shrink: the excluded ranks hold this rank (" + std::to_string(rank) +
            "): expected only the survivors to call Shrink, each with the list of the lost ranks");
  }
  return excluded;
}

std::pair<int, int> RankAfterShrink(std::span<const int32_t> excluded, int rank, int world_size) {
  const auto below = std::lower_bound(excluded.begin(), excluded.end(), rank) - excluded.begin();
  return {rank - static_cast<int>(below), world_size - static_cast<int>(excluded.size())};
}

}  // namespace infini::ccl::internal
