// The host's check of a plugin's communicators: a communicator whose size
// or rank is not what was asked (a library that quietly made a smaller one)
// is refused at once, so nothing ever runs, or is judged, on a wrong world.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::ccl::internal {

// Each handles[i] must be rank ranks[i] of `world_size` ranks. On a
// mismatch every handle is freed (aborted where the plugin can) and Error
// names the plugin, the call and both figures.
void CheckMembership(const Backend& backend, std::span<const infiniCclComm_t> handles,
                     std::span<const int> ranks, int world_size, std::string_view call);

// A split's child: the host cannot know its size without asking every
// rank, so it checks what holds on every rank: 0 <= rank < size <= the
// parent's size. Returns {rank, size}; frees the handle and throws otherwise.
std::pair<int, int> CheckSplitMembership(const Backend& backend, infiniCclComm_t handle,
                                         int parent_world_size);

// A shrink's exclusion list, as every survivor must pass it: sorted and
// without duplicates. Throws Error(infiniCclInvalidArgument) naming the
// value for a rank outside [0, world_size), a list of every rank, or one
// holding `rank` (the caller: excluded ranks do not call Shrink).
std::vector<int32_t> NormalizedExclusion(std::span<const int> excluded_ranks, int rank,
                                         int world_size);

// What a survivor must be after the shrink: its rank renumbered past the
// excluded below it, in a world of the others. `excluded` is normalized.
std::pair<int, int> RankAfterShrink(std::span<const int32_t> excluded, int rank, int world_size);

}  // namespace infini::ccl::internal
