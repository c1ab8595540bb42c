// The thread that runs a staged communicator's host work (issue 33): a
// collective's caller enqueues it and returns, as with a device
// collective, while this thread copies to the host, runs the transport's
// collective and copies back, one call after another in the order they
// were made (the order every rank makes them in).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace infini::ccl::internal::staged {

class StagedWorker {
 public:
  // `start` runs first on the new thread (it makes the caller's device
  // current there).
  explicit StagedWorker(std::function<void()> start);
  ~StagedWorker();  // runs what is queued, then ends the thread
  StagedWorker(const StagedWorker&) = delete;
  StagedWorker& operator=(const StagedWorker&) = delete;

  // Runs `job` after every job submitted before it.
  void Submit(std::function<void()> job);
  // Returns once every job submitted so far has run.
  void Drain();

 private:
  void Loop(const std::function<void()>& start);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace infini::ccl::internal::staged
