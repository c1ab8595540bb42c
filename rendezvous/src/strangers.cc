#include "strangers.h"

#include <sys/resource.h>

#include <algorithm>
#include <iterator>
#include <utility>

namespace infini::rendezvous {

void Strangers::Add(ClientId id, std::string peer, Milliseconds accepted_at) {
  oldest_first_.push_back(id);
  std::list<ClientId>& of_peer = by_peer_[peer];
  of_peer.push_back(id);
  entries_.emplace(id, Entry{.peer = std::move(peer),
                             .accepted_at = accepted_at,
                             .in_all = std::prev(oldest_first_.end()),
                             .in_peer = std::prev(of_peer.end())});
}

void Strangers::Remove(ClientId id) {
  const auto found = entries_.find(id);
  if (found == entries_.end()) return;
  oldest_first_.erase(found->second.in_all);
  const auto of_peer = by_peer_.find(found->second.peer);
  of_peer->second.erase(found->second.in_peer);
  if (of_peer->second.empty()) by_peer_.erase(of_peer);
  entries_.erase(found);
}

ClientId Strangers::NextBeyondCaps(ClientId newcomer) const {
  if (const auto found = entries_.find(newcomer); found != entries_.end()) {
    const std::list<ClientId>& of_peer = by_peer_.at(found->second.peer);
    // Never `newcomer`: beyond a cap of at least 1, it is the newest of two.
    if (of_peer.size() > max_per_peer_) return of_peer.front();
  }
  if (oldest_first_.size() > max_connections_ && oldest_first_.front() != newcomer) {
    return oldest_first_.front();
  }
  return 0;
}

ClientId Strangers::OldestToShedForDescriptors(ClientId newcomer, Milliseconds now) const {
  if (oldest_first_.empty() || oldest_first_.front() == newcomer) return 0;
  const ClientId oldest = oldest_first_.front();
  return now - entries_.at(oldest).accepted_at >= kDescriptorShedAfterMs ? oldest : 0;
}

void DescriptorLimit::Read() {
  rlimit limit{};
  limit_ = getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY
               ? 0
               : static_cast<size_t>(limit.rlim_cur);
  reserve_ = std::clamp<size_t>(limit_ / 8, 16, 1024);
}

bool DescriptorLimit::ShouldWarn(Milliseconds now) {
  if (warned_at_ != 0 && now - warned_at_ < kWarnEveryMs) return false;
  warned_at_ = now;
  return true;
}

}  // namespace infini::rendezvous
