// The thread that runs a staged communicator's host steps (issue 33): a
// collective's caller enqueues its copies and returns, as with a device
// collective, while this thread waits for the input in host memory, runs
// the transport's collective and releases the copies back, one call after
// another in the order they were made (the order every rank makes them
// in). It never calls the device runtime (staged_call.h says why).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace infini::ccl::internal::staged {

class StagedWorker {
 public:
  StagedWorker();
  ~StagedWorker();  // runs what is queued, then ends the thread
  StagedWorker(const StagedWorker&) = delete;
  StagedWorker& operator=(const StagedWorker&) = delete;

  // Runs `job` after every job submitted before it.
  void Submit(std::function<void()> job);
  // Returns once every job submitted so far has run.
  void Drain();

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace infini::ccl::internal::staged
