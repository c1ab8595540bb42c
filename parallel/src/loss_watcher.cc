#include "loss_watcher.h"

#include <algorithm>
#include <optional>

#include "group_state.h"
#include "infini/ccl/trace.h"
#include "infini/common/loss_notice.h"

namespace infini::parallel::internal {
namespace {

// The longest one wait for the next notice lasts (one small store call per
// slice while nothing happens).
constexpr std::chrono::milliseconds kWaitSlice{100};
constexpr std::chrono::milliseconds kRetryPause{20};

}  // namespace

void GroupRegistry::Add(GroupState* group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(group);
}

void GroupRegistry::Remove(GroupState* group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.erase(std::remove(groups_.begin(), groups_.end(), group), groups_.end());
}

std::vector<GroupState*> GroupRegistry::Groups() {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_;
}

void GroupRegistry::RevokeAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (GroupState* group : groups_) group->RevokeForLoss();
}

LossWatcher::LossWatcher(std::shared_ptr<rendezvous::Store> store,
                         std::shared_ptr<GroupRegistry> groups, std::set<int> known_lost,
                         int lane_rank)
    : store_(std::move(store)),
      groups_(std::move(groups)),
      lost_(std::move(known_lost)),
      lane_rank_(lane_rank),
      thread_([this] { Loop(); }) {}

LossWatcher::~LossWatcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

std::set<int> LossWatcher::Lost() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_;
}

std::optional<std::set<int>> LossWatcher::WaitForLossBeyond(
    const std::set<int>& known, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto beyond = [&] {
    return std::any_of(lost_.begin(), lost_.end(), [&](int rank) { return !known.count(rank); });
  };
  if (!changed_.wait_until(lock, deadline, beyond)) return std::nullopt;
  return lost_;
}

void LossWatcher::ReadNewNotices() {
  const int64_t count = store_->Add(loss_notice::kCountKey, 0);
  std::set<int> named;
  int64_t read = notices_read_;
  for (; read < count; ++read) {
    // The number is taken before the notice is written: Get waits for it.
    const auto notice = loss_notice::Parse(store_->Get(loss_notice::NoticeKey(read + 1)));
    if (notice) named.insert(notice->global_ranks.begin(), notice->global_ranks.end());
  }
  if (read == notices_read_) return;
  bool names_someone_new;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    names_someone_new =
        std::any_of(named.begin(), named.end(), [&](int rank) { return !lost_.count(rank); });
  }
  if (names_someone_new && ccl::trace::Enabled()) {
    const int64_t now = ccl::trace::NowNs();
    ccl::trace::RecordFault(lane_rank_, ccl::trace::Category::kRecovery, "loss_notice", "",
                            ccl::trace::Facts()
                                .Add("lost_ranks", std::vector<int>(named.begin(), named.end()))
                                .Add("notices_read", read),
                            now, now);
  }
  // Before anyone is told: a rank that hears of the loss must find its
  // groups revoked, not a collective that waits for the dead.
  if (names_someone_new) groups_->RevokeAll();
  std::lock_guard<std::mutex> lock(mutex_);
  notices_read_ = read;
  lost_.insert(named.begin(), named.end());
  changed_.notify_all();
}

void LossWatcher::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const int64_t next = notices_read_ + 1;
    lock.unlock();
    std::chrono::milliseconds pause{0};
    try {
      // The store answers as soon as the next notice is written: a loss is
      // heard at once, not at the next poll; the slice bounds how long the
      // Context's end waits for this thread.
      store_->Wait({loss_notice::NoticeKey(next)}, kWaitSlice);
      ReadNewNotices();
      // A key written before its number was counted (not how the launcher
      // writes): look again shortly rather than spin.
      std::lock_guard<std::mutex> read(mutex_);
      if (notices_read_ < next) pause = kRetryPause;
    } catch (const rendezvous::StoreTimeoutError&) {
      // No notice in this slice.
    } catch (const rendezvous::StoreError&) {
      // The launcher's store is gone or slow: the run is ending, or a later
      // slice will do.
      pause = kWaitSlice;
    }
    lock.lock();
    if (pause.count() > 0) changed_.wait_for(lock, pause, [&] { return stopping_; });
  }
}

}  // namespace infini::parallel::internal
