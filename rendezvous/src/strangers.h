// The connections that have not completed their hello ("strangers"), without
// sockets: listed oldest first, in all and per peer address, so that the
// connection layer knows which one to close when a newcomer goes beyond the
// caps (max_unauthenticated_connections, max_unauthenticated_per_peer) or the
// descriptors run short. And the process's open-file limit, with the
// descriptors kept free of strangers below it.
//
// A client holding the token is removed as soon as its hello shows its ticket
// (or once it is accepted): it is never closed to make room.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>

#include "key_value_table.h"  // ClientId, Milliseconds

namespace infini::rendezvous {

class Strangers {
 public:
  // A stranger this old may be closed when descriptors run short (the caps
  // close the oldest whatever its age): a client of the run says its hello
  // at once, and so does one of a store without a token, whose hello is all
  // it needs.
  static constexpr Milliseconds kDescriptorShedAfterMs = 1000;

  Strangers(size_t max_connections, size_t max_per_peer)
      : max_connections_(max_connections), max_per_peer_(max_per_peer) {}

  // Lists a connection just accepted from `peer` (its address's bytes).
  void Add(ClientId id, std::string peer, Milliseconds accepted_at);
  // Unlists it; nothing when it is not listed.
  void Remove(ClientId id);
  bool Contains(ClientId id) const { return entries_.contains(id); }
  size_t size() const { return oldest_first_.size(); }
  bool empty() const { return oldest_first_.empty(); }
  // The oldest stranger; only when not empty().
  ClientId oldest() const { return oldest_first_.front(); }

  // The oldest other stranger to close so that `newcomer` fits the caps
  // (its peer's first, then all), or 0 when they hold.
  ClientId NextBeyondCaps(ClientId newcomer) const;
  // The oldest stranger, when it is not `newcomer` and had time to say its
  // hello (kDescriptorShedAfterMs); else 0.
  ClientId OldestToShedForDescriptors(ClientId newcomer, Milliseconds now) const;

 private:
  struct Entry {
    std::string peer;
    Milliseconds accepted_at = 0;
    std::list<ClientId>::iterator in_all;
    std::list<ClientId>::iterator in_peer;
  };

  size_t max_connections_;
  size_t max_per_peer_;
  std::list<ClientId> oldest_first_;
  std::unordered_map<std::string, std::list<ClientId>> by_peer_;  // oldest first
  std::unordered_map<ClientId, Entry> entries_;
};

// The process's soft open-file limit, read at start and by every sweep, and
// how many descriptors below it are kept free of strangers.
class DescriptorLimit {
 public:
  // Warnings are said once a minute at most.
  static constexpr Milliseconds kWarnEveryMs = 60000;

  void Read();
  // 0: no limit.
  size_t limit() const { return limit_; }
  size_t reserve() const { return reserve_; }
  // Descriptor `fd` reaches into the reserve: a stranger makes room.
  // Descriptors are handed out lowest first, so its number tells how many
  // are in use.
  bool InReserve(size_t fd) const { return limit_ != 0 && fd + reserve_ >= limit_; }
  // Descriptor `fd` is at 90 % of the limit or above.
  bool Near(size_t fd) const { return limit_ != 0 && fd * 10 >= limit_ * 9; }
  // Whether to warn now; true at most once per kWarnEveryMs.
  bool ShouldWarn(Milliseconds now);

 private:
  size_t limit_ = 0;
  size_t reserve_ = 16;
  Milliseconds warned_at_ = 0;  // of the last warning; 0: never
};

}  // namespace infini::rendezvous
