// The process's monitor thread (model: PyTorch's NCCL watchdog). It watches
// every operation in flight and, for groups with work in flight, their
// communicator's asynchronous error. An overdue operation or an async error
// → one line on stderr, abort every communicator, std::_Exit(kWatchdogExitCode).
// It knows groups only as WatchedGroup, so it sits below them.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/parallel/watchdog.h"
#include "work_state.h"

namespace infini::parallel::internal {

// What the watchdog needs of a process group.
class WatchedGroup {
 public:
  virtual ~WatchedGroup() = default;
  virtual std::string WatchName() const = 0;
  // The rank whose trace lane its events go to (the launch rank).
  virtual int TraceLane() const = 0;
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
  bool stuck_notice_given_ = false;  // once per process
  std::vector<std::shared_ptr<WorkState>> works_;
  std::vector<WatchedGroup*> groups_;
  std::thread thread_;
};

}  // namespace infini::parallel::internal
