// Thread ranks of one process meeting to create their communicators of a
// group with one multi-device init call (cnclInitComms, HcclCommInitAll):
// some vendor libraries cannot create a process's ranks from concurrent
// threads, and for the others one call is still cheaper.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::parallel::internal {

// Makes all local ranks' communicators from (group ranks, devices).
using InitLocalRanks = std::function<std::vector<ccl::Communicator>(
    const std::vector<int>& ranks, const std::vector<int>& devices)>;

// Called by each of `local_members` threads of this process for the group
// identified by `key`; the last to arrive calls `init` for everyone, and each
// caller gets its own communicator (or the init's error).
ccl::Communicator JoinLocalInit(const std::string& key, int local_members, int group_rank,
                                int device, const InitLocalRanks& init);

}  // namespace infini::parallel::internal
