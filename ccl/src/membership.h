// The host's check of a plugin's communicators: a communicator whose size
// or rank is not what was asked (a library that quietly made a smaller one)
// is refused at once, so nothing ever runs, or is judged, on a wrong world.
#pragma once

#include <span>
#include <string_view>

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

}  // namespace infini::ccl::internal
