// Internal: what a process group sees of its rank's runtime, and no more
// (model: c10d's ProcessGroup(store, rank, size, options)). Context fills it
// in; the group, its creation and its work never see the Context, so they
// sit below it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "infini/ccl/ccl.h"
#include "infini/parallel/env_reader.h"
#include "infini/parallel/rank.h"
#include "infini/rendezvous/store.h"

namespace infini::parallel::internal {

class GroupRegistry;  // loss_watcher.h

struct GroupEnvironment {
  Rank rank;  // who this rank is in the world
  std::shared_ptr<const ccl::Backend> backend;
  int device_index = 0;
  bool shares_device = false;  // communicators are made with allow_device_sharing
  // The rank's own store connection, keys under key_prefix.
  std::shared_ptr<rendezvous::Store> store;
  // A new connection to the same store, keys under key_prefix: for waits on
  // other threads (the watchdog's diagnosis, the hang report, a plugin's
  // bootstrap). Holds no reference to the Context.
  std::function<std::shared_ptr<rendezvous::Store>()> connect_store;
  std::string key_prefix;                // "<run_id>/<restart_count>"
  std::chrono::milliseconds timeout{0};  // INFINI_CCL_TIMEOUT_S
  DebugLevel debug = DebugLevel::kOff;   // INFINI_CCL_DEBUG
  // --on_failure=shrink: a failed collective is a PeerLostError, and the
  // group is listed in `registry` so that a loss revokes it.
  bool shrink_on_failure = false;
  std::shared_ptr<GroupRegistry> registry;  // null unless shrink_on_failure
  // Recoveries so far (Context::RecoverFromLoss): groups of a renumbered
  // world keep their keys apart from the old world's.
  int world_generation = 0;
};

}  // namespace infini::parallel::internal
