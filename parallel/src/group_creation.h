// Internal: making a process group (model: c10d's new_group, which lives
// outside the ProcessGroup): member validation, the group's keys (a digest
// of its members and a generation), the unique id shared from its root, the
// arrival keys that let an overdue init name who never came, and the
// communicator's init under the watchdog.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "group_environment.h"
#include "group_state.h"

namespace infini::parallel::internal {

// Collective over `members` (see Context::NewGroup). A rank that is not a
// member gets a group without a communicator. Throws ParallelUsageError for
// a bad name or member list.
std::unique_ptr<GroupState> CreateGroup(GroupEnvironment environment, const std::string& name,
                                        std::vector<int> members);

// After a loss (Context::RecoverFromLoss): `new_rank_of[r]` is world rank
// r's number among the survivors, -1 when it was lost. Renumbers the
// group's members and, on a member, replaces its communicator by a shrink
// among the surviving members (ShrinkMode::kAbort; collective over them, in
// the order the groups were made) under keys of world `world_generation`.
// Throws ccl::Error when the shrink fails, ParallelError when the backend
// could not revoke (the group was aborted instead).
void ShrinkGroupAfterLoss(GroupState& group, const std::vector<int>& new_rank_of,
                          const Rank& renumbered, int world_generation);

// At an admission of joiners (Context::AdmitJoiners): a group of the whole
// world becomes a group of the new world (ranks 0..new_world_size-1, the
// joiners last) with a new communicator made as CreateGroup makes one,
// under keys of world `world_generation`; the joiners make it with
// CreateGroup. Throws what CreateGroup throws.
void RemakeGroupForJoiners(GroupState& group, int new_world_size, const Rank& renumbered,
                           int world_generation);

}  // namespace infini::parallel::internal
