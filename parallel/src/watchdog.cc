#include "watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <set>

#include "flight_recorder.h"
#include "infini/ccl/error.h"
#include "infini/ccl/trace.h"

namespace infini::parallel::internal {
namespace {

constexpr std::chrono::milliseconds kPollInterval{100};
// Aborting a communicator should be quick; a backend stuck even there must
// not keep the process alive.
constexpr std::chrono::seconds kAbortGrace{5};
// Beyond the flight recorder's gathering window: connecting, publishing,
// and a non-reporter's wait for the reporter.
constexpr std::chrono::seconds kReportMargin{7};
// How long an overdue work's diagnosis may take (a few store reads).
constexpr std::chrono::seconds kDiagnoseWindow{3};
// A work still pending this long is said once per process, long before its
// timeout (10 minutes by default) ends the run: as infini_run's waiting
// lines, so that a hang is not silence. Half the timeout when that is less.
constexpr std::chrono::seconds kStuckNoticeAfter{30};

// The store may be unreachable: the report runs on its own thread, which
// is left behind (the process ends right after) when it takes too long.
// `diagnose`'s answer, or a line saying it did not come within `limit` (it
// may ask the store, which may be what is stuck).
std::string DiagnoseWithin(const std::function<std::string()>& diagnose,
                           std::chrono::seconds limit) {
  auto answer = std::make_shared<std::promise<std::string>>();
  std::future<std::string> future = answer->get_future();
  std::thread([diagnose, answer] {
    try {
      answer->set_value(diagnose());
    } catch (const std::exception& error) {
      answer->set_value(std::string("could not tell why (") + error.what() + ")");
    }
  }).detach();
  if (future.wait_for(limit) != std::future_status::ready) {
    return "could not tell why within " + std::to_string(limit.count()) + " s";
  }
  return future.get();
}

void ReportHangWithin(WatchedGroup& group, std::chrono::seconds limit) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable finished_changed;
    bool finished = false;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([&group, shared] {
    const int lane = group.TraceLane();
    const std::string name = group.WatchName();
    try {
      group.ReportHang([&](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
        // The report on the timeline too (the caller flushes before exiting).
        if (ccl::trace::Enabled()) {
          const int64_t now = ccl::trace::NowNs();
          ccl::trace::RecordFault(lane, ccl::trace::Category::kWatchdog, "hang_report", name,
                                  ccl::trace::Facts().Add("line", line), now, now);
        }
      });
    } catch (const std::exception& error) {
      std::fprintf(stderr, "infini_ccl flight recorder: no report (%s)\n", error.what());
      std::fflush(stderr);
    }
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->finished = true;
    shared->finished_changed.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->mutex);
  if (!shared->finished_changed.wait_for(lock, limit, [&] { return shared->finished; })) {
    std::fprintf(stderr, "infini_ccl flight recorder: no report within %d s\n",
                 static_cast<int>(limit.count()));
    std::fflush(stderr);
  }
}

// The timeline's point for why the watchdog fires (docs/tracing.md),
// written at once: the process ends within seconds and skips the
// recorder's exit.
void TraceFiring(int lane_rank, const char* name, const std::string& group,
                 const ccl::trace::Facts& facts) {
  const int64_t now = ccl::trace::NowNs();
  ccl::trace::RecordFault(lane_rank, ccl::trace::Category::kWatchdog, name, group, facts, now, now);
  ccl::trace::FlushNow();
}

}  // namespace

// Never destroyed: a process group that is itself a static may unregister
// during static destruction, after any destructor of ours would have run. The
// thread is stopped at exit instead (atexit handlers run in reverse order of
// registration, so before the statics made earlier, such as the backends).
Watchdog& Watchdog::Instance() {
  static Watchdog* watchdog = [] {
    auto* instance = new Watchdog;
    std::atexit([] { Instance().Stop(); });
    return instance;
  }();
  return *watchdog;
}

Watchdog::Watchdog() : thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::AddWork(std::shared_ptr<WorkState> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  works_.push_back(std::move(work));
}

void Watchdog::RemoveWork(const WorkState* work) {
  std::lock_guard<std::mutex> lock(mutex_);
  works_.erase(std::remove_if(works_.begin(), works_.end(),
                              [work](const auto& watched) { return watched.get() == work; }),
               works_.end());
}

void Watchdog::AddGroup(WatchedGroup* group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(group);
}

void Watchdog::RemoveGroup(WatchedGroup* group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.erase(std::remove(groups_.begin(), groups_.end(), group), groups_.end());
  for (auto& work : works_) {
    if (work->owner == group) work->owner = nullptr;
  }
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kPollInterval);
    if (stopping_) break;
    const auto now = std::chrono::steady_clock::now();
    std::set<WatchedGroup*> busy;
    for (size_t i = 0; i < works_.size();) {
      WorkState& work = *works_[i];
      if (work.Poll()) {
        works_[i] = std::move(works_.back());
        works_.pop_back();
        continue;
      }
      if (now - work.start > work.timeout) {
        const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(work.timeout);
        const std::string why = work.diagnose
                                    ? DiagnoseWithin(work.diagnose, kDiagnoseWindow)
                                    : "a rank skipped it, called another collective, or died";
        if (ccl::trace::Enabled()) {
          TraceFiring(work.lane_rank, "timeout", work.group,
                      ccl::trace::Facts()
                          .Add("op", work.op)
                          .Add("seq", static_cast<int64_t>(work.sequence))
                          .Add("global_rank", work.global_rank)
                          .Add("timeout_s", static_cast<int64_t>(seconds.count()))
                          .Add("why", why));
        }
        Fire(work.Describe() + " did not complete within INFINI_CCL_TIMEOUT_S=" +
                 std::to_string(seconds.count()) + " s (" + why + ")",
             work.owner);
      }
      const auto notice_after =
          std::min<std::chrono::steady_clock::duration>(kStuckNoticeAfter, work.timeout / 2);
      if (!stuck_notice_given_ && now - work.start > notice_after) {
        stuck_notice_given_ = true;
        std::fprintf(
            stderr,
            "infini_ccl watchdog (pid %d): %s still %s after %lld s; the run ends at "
            "INFINI_CCL_TIMEOUT_S=%lld s unless it completes (infini_run --dump_stacks shows "
            "where every rank is)\n",
            static_cast<int>(getpid()), work.Describe().c_str(),
            // A step outside any group (loading the backend) waits for no rank.
            work.description.empty() ? "waits for the other ranks" : "has not returned",
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::seconds>(now - work.start).count()),
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::seconds>(work.timeout).count()));
        std::fflush(stderr);
      }
      if (work.owner != nullptr) busy.insert(work.owner);
      ++i;
    }
    // Only groups with work in flight: a peer that finished and closed its
    // side is no failure.
    for (WatchedGroup* group : busy) {
      infiniCclResult_t error = infiniCclSuccess;
      try {
        error = group->AsyncError();
      } catch (const std::exception&) {
        continue;
      }
      if (error != infiniCclSuccess && error != infiniCclInProgress) {
        if (ccl::trace::Enabled()) {
          TraceFiring(group->TraceLane(), "async_error", group->WatchName(),
                      ccl::trace::Facts().Add("error", ccl::ResultName(error)));
        }
        Fire("group '" + group->WatchName() + "' reported an asynchronous error: " +
             ccl::ResultName(error) + " (a peer failed or the device faulted)");
      }
    }
  }
}

void Watchdog::Fire(const std::string& line, WatchedGroup* hung) {
  std::fprintf(stderr,
               "infini_ccl watchdog (pid %d): %s; aborting communicators and exiting with %d\n",
               static_cast<int>(getpid()), line.c_str(), kWatchdogExitCode);
  std::fflush(stderr);
  if (hung != nullptr) ReportHangWithin(*hung, kFlightGatherWindow + kReportMargin);
  std::vector<WatchedGroup*> groups = groups_;  // the caller holds mutex_
  auto aborted = std::async(std::launch::async, [groups] {
    for (WatchedGroup* group : groups) {
      try {
        group->AbortFromWatchdog();
      } catch (...) {
      }
    }
  });
  aborted.wait_for(kAbortGrace);
  ccl::trace::FlushNow();  // the aborts' events; std::_Exit skips the recorder's exit
  std::fflush(stdout);
  std::_Exit(kWatchdogExitCode);
}

}  // namespace infini::parallel::internal
