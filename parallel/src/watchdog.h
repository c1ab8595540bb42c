// The process's monitor thread (model: PyTorch's NCCL watchdog). It watches
// every operation in flight and, for groups with work in flight, their
// communicator's asynchronous error. An overdue operation or an async error
// → one line on stderr, abort every communicator, std::_Exit(124).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "event_pool.h"
#include "infini/ccl/ccl.h"

namespace infini::parallel::internal {

// One operation: registered before the backend is called (host backends
// block inside the call), completed by an event on the communication stream.
struct WorkState {
  std::string op;  // "all_reduce"
  size_t bytes = 0;
  std::string group;
  uint64_t sequence = 0;
  int global_rank = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::milliseconds timeout{0};
  // The group whose communicator runs it (nullptr: none yet, e.g. init).
  class WatchedGroup* owner = nullptr;
  // Its entry in the flight recorder (0: not recorded), set before AddWork.
  uint64_t flight_id = 0;
  // When it is overdue, says why (e.g. which members never arrived at a
  // group's init); run on a helper thread that is waited for a few seconds
  // at most. Set before AddWork.
  std::function<std::string()> diagnose;

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

// What the watchdog needs of a process group.
class WatchedGroup {
 public:
  virtual ~WatchedGroup() = default;
  virtual std::string WatchName() const = 0;
  // The communicator's async error (infiniCclSuccess when none or unknown).
  virtual infiniCclResult_t AsyncError() = 0;
  // Aborts the communicator; called from the monitor thread.
  virtual void AbortFromWatchdog() = 0;
  // Publishes and gathers flight records, prints the hang report (see
  // flight_recorder.h) through `print`; called from a helper thread that the
  // watchdog stops waiting for after a deadline.
  virtual void ReportHang(const std::function<void(const std::string&)>& print) = 0;
};

class Watchdog {
 public:
  static Watchdog& Instance();
  ~Watchdog();

  void AddWork(std::shared_ptr<WorkState> work);
  // Stops watching `work` (it failed while being issued: nothing is in
  // flight). Its issuing thread then holds the last reference, so the
  // exception it stored dies on the thread that threw it: libstdc++'s
  // exception refcount is invisible to ThreadSanitizer.
  void RemoveWork(const WorkState* work);
  void AddGroup(WatchedGroup* group);
  // After this returns the watchdog never touches `group` again.
  void RemoveGroup(WatchedGroup* group);
  // Ends the monitor thread (at exit); registrations are then ignored.
  void Stop();

 private:
  Watchdog();
  void Loop();
  // Overdue or failed asynchronously: report, abort everything, exit.
  // `hung`, when not null, is the group whose operation is overdue: its
  // hang report comes first.
  [[noreturn]] void Fire(const std::string& line, WatchedGroup* hung = nullptr);

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<WorkState>> works_;
  std::vector<WatchedGroup*> groups_;
  std::thread thread_;
};

}  // namespace infini::parallel::internal
