#include "staged_worker.h"

#include <utility>

namespace infini::ccl::internal::staged {

StagedWorker::StagedWorker() : thread_([this] { Loop(); }) {}

StagedWorker::~StagedWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StagedWorker::Submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  changed_.notify_all();
}

void StagedWorker::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
}

void StagedWorker::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, with nothing left to run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    job();
    lock.lock();
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace infini::ccl::internal::staged
