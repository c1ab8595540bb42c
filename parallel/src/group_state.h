// Internal: what a ProcessGroup holds. It is made by CreateGroup
// (group_creation.h) and issues work in process_group.cc; it sees its rank
// through a GroupEnvironment, never the Context.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "buffer_registry.h"
#include "event_pool.h"
#include "group_environment.h"
#include "infini/ccl/ccl.h"
#include "watchdog.h"

namespace infini::parallel::internal {

class GroupState : public WatchedGroup {
 public:
  explicit GroupState(GroupEnvironment seen) : environment(std::move(seen)) {}
  ~GroupState() override;

  std::string WatchName() const override { return name; }
  int TraceLane() const override { return trace_lane; }
  infiniCclResult_t AsyncError() override;
  void AbortFromWatchdog() override;
  void ReportHang(const std::function<void(const std::string&)>& print) override;
  // Abort from any thread, at most once; `why` goes to the trace.
  void AbortOnce(const char* why);
  // A rank was lost (--on_failure=shrink): ends outstanding work and
  // refuses new work until ShrinkGroupAfterLoss (group_creation.h) replaces
  // the communicator. From any thread.
  void RevokeForLoss();

  // The rank changes when a recovery renumbers the world.
  GroupEnvironment environment;
  // The trace's lane: the launch rank, which no recovery changes (a copy,
  // so that other threads never read `environment` while a shrink sets it).
  const int trace_lane = environment.rank.launch_global_rank();
  std::string name;
  // "<name>.<hash of members>/<generation>": where the group's keys live.
  std::string store_key;
  std::vector<int> members;
  int group_rank = -1;
  ccl::Communicator comm;
  std::optional<ccl::Stream> comm_stream;
  std::optional<ccl::Event> ready_event;
  std::shared_ptr<EventPool> events;
  uint32_t flight_group = 0;     // id in the flight recorder
  uint64_t next_sequence = 0;    // every operation
  uint64_t next_collective = 0;  // collectives compared in debug mode
  ccl::CommConfig config;        // the communicator's, for a shrink after a loss
  std::atomic<bool> aborted{false};
  // Set when a loss revoked the current communicator; each communicator has
  // its own, so that work issued on a revoked one stays lost after a shrink.
  std::shared_ptr<std::atomic<bool>> revoked_for_loss = std::make_shared<std::atomic<bool>>(false);
  std::mutex abort_mutex;
  bool watched = false;
  // Buffers registered with `comm`, carried over to the communicators that
  // replace it. Shared with the callers' GroupBufferRegistrations, which
  // may outlive the group. Changed under abort_mutex where `comm` is.
  std::shared_ptr<BufferRegistry> registrations;
};

// "0, 2, 5": a member list in messages.
std::string MemberList(const std::vector<int>& members);

}  // namespace infini::parallel::internal
