// A process's rank threads, started all or none (ccl_conformance, ccl_bench,
// gpt2 --nthread_per_process).
//
//   RunOnThreads(threads, "rank threads (--nthread_per_process=" + ... + ")",
//                [&](int thread_rank) { RunRank(thread_rank); });
//
// A thread that cannot be made (EAGAIN: a limit on processes or threads, or
// address space for its stack) throws std::system_error from std::thread's
// constructor; left alone, the threads already made stay joinable and the
// program ends in std::terminate. Here it is one ThreadStartError instead:
//
//   cannot start thread 213 of 1024 for rank threads (--nthread_per_process=1024):
//   Resource temporarily unavailable (the 212 started were stopped; ...)
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace infini::parallel {

class ThreadStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Makes one thread that runs its argument, like std::thread's constructor
// (the default); tests pass one that fails on a chosen call.
using ThreadMaker = std::function<std::thread(std::function<void()>)>;

// Runs body(i) for every i in [0, count) on `count` new threads and returns
// once every body returned. All or none: each thread waits until every one
// was made, so a body that meets the others (a communicator's init, a
// barrier) never waits for one that does not exist. When thread k cannot be
// made, the k made return without running body and are joined, and
// ThreadStartError names `what`, k + 1, `count` and why. `body` handles its
// own exceptions.
inline void RunOnThreads(int count, const std::string& what, const std::function<void(int)>& body,
                         const ThreadMaker& make = {}) {
  enum class Gate { kWait, kGo, kStop };
  std::mutex mutex;
  std::condition_variable changed;
  Gate gate = Gate::kWait;
  const auto open = [&](Gate to) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      gate = to;
    }
    changed.notify_all();
  };
  const auto passes = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return gate != Gate::kWait; });
    return gate == Gate::kGo;
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(count > 0 ? count : 0));
  for (int index = 0; index < count; ++index) {
    std::function<void()> run = [&passes, &body, index] {
      if (passes()) body(index);
    };
    try {
      threads.push_back(make ? make(std::move(run)) : std::thread(std::move(run)));
    } catch (const std::system_error& error) {
      open(Gate::kStop);
      for (std::thread& thread : threads) thread.join();
      throw ThreadStartError(
          "cannot start thread " + std::to_string(index + 1) + " of " + std::to_string(count) +
          " for " + what + ": " + error.what() + " (the " + std::to_string(index) +
          " started were stopped; a limit on threads or memory: ulimit -u, ulimit -v, ulimit -s, "
          "the cgroup's pids.max)");
    }
  }
  open(Gate::kGo);
  for (std::thread& thread : threads) thread.join();
}

}  // namespace infini::parallel
