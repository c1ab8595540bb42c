// Internal: what a ProcessGroup holds, and how it is made.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "event_pool.h"
#include "infini/ccl/ccl.h"
#include "infini/parallel/context.h"
#include "watchdog.h"

namespace infini::parallel::internal {

class GroupState : public WatchedGroup {
 public:
  ~GroupState() override;

  std::string WatchName() const override { return name; }
  infiniCclResult_t AsyncError() override;
  void AbortFromWatchdog() override;
  void ReportHang(const std::function<void(const std::string&)>& print) override;
  // Abort from any thread, at most once.
  void AbortOnce();

  std::shared_ptr<Context> context;
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
  std::atomic<bool> aborted{false};
  std::mutex abort_mutex;
  bool watched = false;
};

// Collective over `members` (see Context::NewGroup).
std::unique_ptr<GroupState> CreateGroup(std::shared_ptr<Context> context, const std::string& name,
                                        std::vector<int> members);

// Next generation of group `key` made by global rank `global_rank` in this
// process: 0, 1, 2, ... Members make groups in the same order, so their
// counts agree, and a group made twice never reads the first one's id.
uint64_t NextGeneration(int global_rank, const std::string& key);

}  // namespace infini::parallel::internal
