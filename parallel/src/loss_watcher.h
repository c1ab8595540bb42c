// Internal: how a rank learns of a loss under infini_run --on_failure=shrink
// (docs/parallel.md, "In-place recovery"). The launcher writes a notice into
// the store (infini/common/loss_notice.h); a LossWatcher thread per Context
// waits on the next notice's key, reads it as soon as it is written and
// revokes every live group of the
// Context, so that a rank blocked in a collective with the lost rank, or
// about to issue one, gets PeerLostError instead of a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "infini/rendezvous/store.h"

namespace infini::parallel::internal {

class GroupState;

// The live groups of one Context, in the order they were made (the order
// every survivor shrinks them in).
class GroupRegistry {
 public:
  void Add(GroupState* group);
  void Remove(GroupState* group);
  // Safe while groups live: only the rank's own thread makes or destroys them.
  std::vector<GroupState*> Groups();
  // Revokes every group's communicator (from any thread).
  void RevokeAll();

 private:
  std::mutex mutex_;
  std::vector<GroupState*> groups_;
};

class LossWatcher {
 public:
  // `store`: its own connection, keys under the ranks' namespace.
  // `known_lost`: ranks already out of this rank's world (a joiner learns
  // them at its admission); notices naming only those revoke nothing.
  // `lane_rank`: the trace lane a notice heard goes to (the launch rank).
  LossWatcher(std::shared_ptr<rendezvous::Store> store, std::shared_ptr<GroupRegistry> groups,
              std::set<int> known_lost = {}, int lane_rank = 0);
  ~LossWatcher();  // stops the thread
  LossWatcher(const LossWatcher&) = delete;
  LossWatcher& operator=(const LossWatcher&) = delete;

  // Every rank (the launcher's numbering) that any notice named so far.
  std::set<int> Lost();
  // Waits until the notices name a rank outside `known` and returns Lost();
  // nothing when `deadline` passes first.
  std::optional<std::set<int>> WaitForLossBeyond(const std::set<int>& known,
                                                 std::chrono::steady_clock::time_point deadline);

 private:
  void Loop();
  void ReadNewNotices();

  std::shared_ptr<rendezvous::Store> store_;
  std::shared_ptr<GroupRegistry> groups_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  int64_t notices_read_ = 0;
  std::set<int> lost_;
  const int lane_rank_;
  std::thread thread_;
};

}  // namespace infini::parallel::internal
