// Internal: one operation of a process group, as the issuing thread, the
// public Work and the watchdog share it. Its name is ccl's name of the
// collective (ccl::CollectiveName) or one of parallel's own steps below.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "event_pool.h"
#include "infini/ccl/ccl.h"

namespace infini::parallel::internal {

class WatchedGroup;

// Operations of parallel/ that are not one of ccl's collectives.
inline constexpr std::string_view kInitOp = "init";           // a group's communicator being made
inline constexpr std::string_view kSendRecvOp = "send_recv";  // a send and a recv in one group
inline constexpr std::string_view kLoadOp = "load";  // the backend loaded and its device chosen

// One operation: registered before the backend is called (host backends
// block inside the call), completed by an event on the communication stream.
struct WorkState {
  // "all_reduce": ccl::CollectiveName's text or one above (static storage).
  std::string_view op;
  size_t bytes = 0;
  std::string group;
  uint64_t sequence = 0;
  int global_rank = 0;
  int lane_rank = 0;  // the trace's lane: the launch rank, which a recovery keeps
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::milliseconds timeout{0};
  // What the watchdog says of a step outside any group (loading the
  // backend), instead of "op #sequence on group".
  std::string description;
  // The group whose communicator runs it (nullptr: none yet, e.g. init).
  WatchedGroup* owner = nullptr;
  // Its entry in the flight recorder (0: not recorded), set before AddWork.
  uint64_t flight_id = 0;
  // When it is overdue, says why (e.g. which members never arrived at a
  // group's init); run on a helper thread that is waited for a few seconds
  // at most. Set before AddWork.
  std::function<std::string()> diagnose;
  // Shrink mode: the flag of the communicator it runs on, set when a loss
  // revoked it; a device backend's work may then end without an error of
  // its own, and Work::Wait says it was lost.
  std::shared_ptr<const std::atomic<bool>> revoked_for_loss;

  ~WorkState();
  // Called by the issuing thread once the backend returned; `pool` takes the
  // event back when this state goes away with its work complete.
  void Enqueued(ccl::Event end_event, std::shared_ptr<EventPool> pool = nullptr);
  void Failed(std::exception_ptr error);
  // Done without a device event (host-side steps such as communicator init).
  void Complete();
  // Done or failed; queries the end event.
  bool Poll();
  // Handed to the backend (recorded as "started").
  void Started();
  std::exception_ptr error();
  std::string Describe() const;
  // Blocks the host on the end event (no polling delay); the watchdog still
  // ends the process if it never completes.
  void Synchronize();
  // Waits for the end event on `stream` (no host block), when there is one.
  void MakeStreamWait(const ccl::Stream& stream);

 private:
  std::mutex mutex_;
  std::optional<ccl::Event> end_event_;
  // Called with mutex_ held when the work becomes done or failed.
  void SetDone();

  std::shared_ptr<EventPool> pool_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace infini::parallel::internal
